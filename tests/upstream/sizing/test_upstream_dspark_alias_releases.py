"""An out-of-tree model written for the release's DSPARK relay, on patched SGLang 0.5.21+.

The model (``sglang_support/sizing_check.py legacy``) is shaped like Kimi-Linear's
contract on the release: it defines ``get_pp_proxy_dspark_hidden_size``, declares no
``pp_aux_relay_methods`` and sends its captures in ``dspark_hidden_states``.  On the
patched tree, with SGLang's own functions, ``configure_aux_hidden_state_capture(...,
pp_size=2)`` admits it for DSPARK, its CUDA-graph and dummy-forward buffers are kept under
``dspark_hidden_states`` with the width its method reports, both replay loads copy what
its first stage sends into them, and ``resolve_pp_proxy_dspark_hidden_size`` and
``pp_proxy_dspark_hidden_size=`` still work, each with a deprecation warning
(``dspark_alias.py``).  The patch generated without that part, and without the shipped
check's admission, fails the same drive.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python
from sglang_support.family_check import patched_copy

from codemods.upstream.output.pr_body import render
from codemods.upstream.sizing import part as sizing_part

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
GLUE = "sglang/srt/layers/aux_hidden_states.py"
ADMISSION = """\
    if method == "DSPARK" and callable(getattr(model_cls, LEGACY_DSPARK_WIDTH, None)):
        return True
"""


def _report(tree) -> dict:
    proc = run_python(["-m", "sglang_support.sizing_check", "legacy"], tree, timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=RELEASES)
def release(request, sglang_release):
    return sglang_release(request.param)


@pytest.mark.timeout(600)
def test_the_out_of_tree_dspark_model_keeps_working_under_pp(release, tmp_path):
    result, copy = patched_copy(release, tmp_path / "patched", ["llama"])
    report = _report(copy)
    assert report["admitted"] is True
    # The check is live: the same class without the release's width method is refused.
    assert "WithoutOldWidth's decoder stack does not relay DSPARK's" in report["refused"]
    # Stage 1 of 2 receives layer 0 and 1's captures (stage 0 runs layers 0-1).
    assert report["width"] == report["sent"]["dspark_hidden_states"] > 0
    assert report["entry"] == "dspark_hidden_states"
    assert report["new_entry"] == "aux_hidden_states"
    for name, widths in {**report["buffers"], "dummy": report["dummy"]}.items():
        assert widths.get("dspark_hidden_states") == report["width"], name
        assert "aux_hidden_states" not in widths, name
    assert report["refreshed"] == {"pre-planned": True, "full": True}
    assert report["old_resolver"] == report["width"]
    assert report["old_keyword"]["aux_hidden_states"] == report["width"]
    warnings = report["warnings"]
    assert any("get_pp_proxy_dspark_hidden_size is deprecated" in w for w in warnings["width"])
    assert any(
        "resolve_pp_proxy_dspark_hidden_size is deprecated" in w for w in warnings["old_resolver"]
    )
    assert any("pp_proxy_dspark_hidden_size= is deprecated" in w for w in warnings["old_keyword"])
    deprecated = render(result).split("\n### Deprecated\n", 1)[1].split("\n## ", 1)[0]
    for name in (
        "`get_pp_proxy_dspark_hidden_size`",
        "`dspark_hidden_states`",
        ".resolve_pp_proxy_dspark_hidden_size`",
        "`pp_proxy_dspark_hidden_size=`",
    ):
        assert name in deprecated, name


@pytest.mark.timeout(600)
def test_without_the_kept_contract_the_model_breaks(release, tmp_path, monkeypatch):
    monkeypatch.setattr(sizing_part, "keep_dspark_contract_in", lambda tree, changes: changes)
    _, copy = patched_copy(release, tmp_path / "without", ["llama"])
    glue = copy / GLUE
    text = glue.read_text()
    assert text.count(ADMISSION) == 1
    glue.unlink()  # a linked copy: replace the file, not the release's
    glue.write_text(text.replace(ADMISSION, ""))
    report = _report(copy)
    assert report["admitted"] is False
    assert report["entry"] is None
    # The reviewer's report: sized by the old method, but under the other key.
    for widths in report["buffers"].values():
        assert "dspark_hidden_states" not in widths
        assert widths["aux_hidden_states"] == report["width"] > 0
    assert report["refreshed"] == {"pre-planned": False, "full": False}
    assert report["old_resolver"] is None
    assert report["old_keyword"].startswith("raised")
