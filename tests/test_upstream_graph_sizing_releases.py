"""CUDA-graph sizing of the aux entry on the real SGLang 0.5.21-0.5.23 releases.

The family patch of each release also mirrors SGLang's DSPARK PP proxy sizing path for
the aux entry (``graph_sizing.py``) and gives each patched causal-LM class
``get_pp_proxy_aux_hidden_size``.  The patched tree is imported on CPU; for every stage
of 2- and 3-stage splits the real allocation functions allocate the aux entry with
exactly the width the previous stage sends (``sglang_support/sizing_check.py``).
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python
from sglang_support.family_check import patched_copy

from codemods.upstream.graph_sizing import SIZING_MODULES

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
MODEL = ("sglang.srt.models.llama", "LlamaForCausalLM")


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    release = sglang_release(request.param)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("sizing"), ["llama"])
    return release, result, copy


def test_the_patch_mirrors_the_dspark_sizing_path(patched):
    release, result, copy = patched
    for module in SIZING_MODULES:
        path = module.replace(".", "/") + ".py"
        assert f"sglang/srt/{path.removeprefix('sglang/srt/')}" in result.changed
        text = (copy / path).read_text()
        assert "pp_proxy_aux_hidden_size" in text
        assert "pp_proxy_aux_hidden_size" not in (release / path).read_text()
    llama = (copy / "sglang/srt/models/llama.py").read_text()
    assert "def get_pp_proxy_aux_hidden_size(self) -> int:" in llama


@pytest.mark.timeout(600)
def test_buffers_are_sized_with_what_the_previous_stage_sends(patched):
    _, _, copy = patched
    proc = run_python(["-m", "sglang_support.sizing_check", *MODEL], copy, timeout=500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    # 2 + 3 stages, 3 capture sets, 3 batches; stages past the first receive captures.
    assert len(report["checks"]) == (2 + 3) * 3 * 3
    widths = {(label.split(" stage=")[0], label.endswith("stage=0"), width)
              for label, width, _, _ in report["checks"]}
    assert any(width > 0 for _, _, width in widths)
    assert all(width == 0 for _, first, width in widths if first)
