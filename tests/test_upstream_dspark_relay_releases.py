"""SGLang's own DSPARK relay (Kimi-Linear, 0.5.21-0.5.23) made loud.

The patch for ``kimi_linear`` on these releases changes only the relay check of
``KimiLinearModel`` and passes ``git apply --check``; patched again it is empty.  The real
``KimiLinearModel.forward`` of the patched copy, called as the last pipeline stage
(``sglang_support.relay_check``), hands on the relayed captures when the handoff carries
exactly the earlier stages' layers (also for an empty batch) and raises, naming the
layers, when the entry is missing, has the width of another count, or is there although
no earlier stage captures.  The release's own forward goes on silently with fewer (or
unexpected) aux hidden states in those cases.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import git_apply, run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream import dspark_relay, kimi
from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
PASSES = {
    "complete": [4, 4],
    "complete_two_earlier": [8, 4],
    "empty_batch": [4, 4],
    "nothing_earlier": [4, 4],
}
#: case -> (part of the patched stage's error, what the release's stage hands on instead)
RAISES = {
    "missing": ("layers [1] (captured on earlier pipeline stages) are missing", [4]),
    "missing_empty_batch": ("layers [1] (captured on earlier pipeline stages) are missing",
                            [4]),
    "narrow": ("layers [0, 1]: the pipeline-parallel handoff carries width 4, expected 8",
               [4, 4]),
    "unexpected": ("no DSPARK capture layer (layers [4]) lies before layer 3", [4, 4]),
}


def _relay(root) -> dict:
    proc = run_python(["-m", "sglang_support.relay_check"], root, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("version", RELEASES)
def test_patched_relay_raises_naming_the_layers(version, tmp_path):
    release = sglang_tree(version)
    result, copy = patched_copy(release, tmp_path / "patched", models=["kimi_linear"])
    assert result.status == kimi.SUPPORTED
    assert result.changed == [result.model_path]
    assert any(dspark_relay.NOTE in note for note in result.notes)
    assert generate(copy, models=["kimi_linear"]).patch == ""
    patched = _relay(copy)
    for case, widths in PASSES.items():
        assert patched[case].get("aux_widths") == widths, (version, case, patched[case])
    for case, (message, _) in RAISES.items():
        assert message in patched[case].get("error", ""), (version, case, patched[case])


@pytest.mark.parametrize("version", RELEASES)
def test_release_relay_loses_captures_silently(version):
    outcomes = _relay(sglang_tree(version))
    for case, widths in PASSES.items():
        assert outcomes[case].get("aux_widths") == widths, (version, case, outcomes[case])
    for case, (_, silent) in RAISES.items():
        assert outcomes[case].get("aux_widths") == silent, (version, case, outcomes[case])


def test_release_without_the_relay_is_left_to_the_kimi_rewrite():
    release = sglang_tree("0.5.20")
    source = (release / "sglang" / "srt" / "models" / "kimi_linear.py").read_text()
    assert dspark_relay.analyse(source).status == dspark_relay.ABSENT
    assert dspark_relay.rewrite(source, "kimi_linear.py") == source
    result = generate(release, models=["kimi_linear"])
    assert git_apply(release, result.patch, check=True).returncode == 0
    assert all(dspark_relay.METHOD not in change.new for change in result.changes)
