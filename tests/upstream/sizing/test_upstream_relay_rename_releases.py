"""SGLang's own DSPARK relay (Kimi-Linear, Kimi-K3; 0.5.21-0.5.23) serves every capture method.

The family patch renames the relay's ``PPProxyTensors`` entry, its width method and its
CUDA-graph sizing path (``graph_sizing.py``) instead of adding a second mechanism: after it,
no file of the package names ``dspark_hidden_states`` or ``*pp_proxy_dspark_hidden_size``
but in what is kept, deprecated, for out-of-tree models (``dspark_alias.py``), and the real
``KimiLinearModel.forward`` of the patched copy, called as the last pipeline stage
(``sglang_support.relay_check``), takes the earlier stages' captures from the
``aux_hidden_states`` entry the other patched models hand on, one per layer, and refuses a
handoff that carries them under the old key.
Asked for Kimi-Linear alone, these releases need no change.
"""

from __future__ import annotations

import json
import re

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.generate import generate
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.sizing import dspark_alias
from codemods.upstream.sizing.graph_sizing import RESOLVED

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
MISC = "sglang/srt/model_executor/model_runner_components/misc_utils.py"
BUFFERS = "sglang/srt/model_executor/runner_utils/buffers.py"
GLUE = "sglang/srt/layers/aux_hidden_states.py"
LEGACY = 'LEGACY_DSPARK_WIDTH = "get_pp_proxy_dspark_hidden_size"'
#: The comment above it, and the docstring's sentence, that name the old entry and method.
LEGACY_COMMENT = "``dspark_hidden_states`` ``get_pp_proxy_dspark_hidden_size``"
#: case -> aux widths the last stage returns when the entry carries the earlier captures
#: (one per capture: the shipped helpers split the entry by layer).
RELAYED = {
    "complete": [4, 4],
    "complete_two_earlier": [4, 4, 4],
    "empty_batch": [4, 4],
    "nothing_earlier": [4, 4],
}
OLD_NAMES = re.compile(r"dspark_hidden_states|pp_proxy_dspark_hidden_size|SupportsDSparkPPProxy")


def _relay(root, *entries: str) -> dict:
    proc = run_python(["-m", "sglang_support.relay_check", *entries], root, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("version", RELEASES)
def test_one_entry_for_every_capture_method(version, tmp_path):
    release = sglang_tree(version)
    before = [
        p
        for p in (release / "sglang" / "srt").rglob("*.py")
        if OLD_NAMES.search(p.read_text(encoding="utf-8"))
    ]
    assert before, "the release has no DSPARK relay to rename"
    result, copy = patched_copy(release, tmp_path / "patched")
    assert result.model("kimi_linear").status == kimi.SUPPORTED
    left = [
        str(p.relative_to(copy))
        for p in (copy / "sglang").rglob("*.py")
        if OLD_NAMES.search(p.read_text(encoding="utf-8"))
    ]
    # Only what is kept, deprecated, for out-of-tree models names the old names: the
    # resolver's fallback and aliases, the buffers' keyword alias, the guard's admission.
    assert sorted(left) == sorted([MISC, BUFFERS, GLUE])
    misc = (copy / MISC).read_text(encoding="utf-8")
    assert RESOLVED in misc and dspark_alias._ALIASES in misc
    assert len(OLD_NAMES.findall(misc)) == len(OLD_NAMES.findall(RESOLVED + dspark_alias._ALIASES))
    buffers = (copy / BUFFERS).read_text(encoding="utf-8")
    kept = (
        dspark_alias._ALLOCATE_PARAMETERS
        + dspark_alias._ALIASED_ALLOCATION
        + 2 * (dspark_alias._CREATE_PARAMETERS + dspark_alias._CREATE_ARGUMENTS)
    )
    assert len(OLD_NAMES.findall(buffers)) == len(OLD_NAMES.findall(kept))
    glue = (copy / GLUE).read_text(encoding="utf-8")
    assert OLD_NAMES.findall(glue.replace(LEGACY, "")) == OLD_NAMES.findall(LEGACY_COMMENT)
    renamed = {str(p.relative_to(release)) for p in before}
    assert renamed <= set(result.changed)
    relayed = _relay(copy, "aux_hidden_states", "dspark_hidden_states")
    patched = relayed["aux_hidden_states"]
    for case, widths in RELAYED.items():
        assert patched[case].get("aux_widths") == widths, (version, case, patched[case])
    # Captures under the old key are no longer read: the stage says they are missing.
    stale = relayed["dspark_hidden_states"]
    assert "has no 'aux_hidden_states' entry" in stale["complete"]["error"]


@pytest.mark.parametrize("version", RELEASES)
def test_kimi_linear_alone_needs_no_change(version):
    result = generate(sglang_tree(version), models=["kimi_linear"])
    assert result.model("kimi_linear").status == kimi.SUPPORTED
    assert result.patch == ""
