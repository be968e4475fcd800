"""The generated patch on real SGLang releases.

For 0.5.18, 0.5.19 and 0.5.20: the patch passes ``git apply --check`` on the release tree,
applies to a copy of it, is empty on the patched copy (idempotent), and the patched
``kimi_linear.py``, imported on CPU and driven as real pipeline stages in separate processes
(gloo, 2 and 3 stages, captures on every stage, three microbatches incl. an empty one),
hands the logits processor exactly the aux states of the PP=1 run, both in a forked drive
and through the ``codemods.ppcheck`` harness.  The same drive of the unpatched module
fails: ``NotImplementedError`` from the setter, and fewer aux states when the ids are
stored past the guard.  0.5.21 is reported as already supported: asked for alone it needs
no change, and with the family its relay's entry is renamed for every capture method.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sglang_support.env import git_apply, linked_copy, run_check
from sglang_support.generated import release_result

from codemods.cli.commands import cli
from codemods.upstream.generate import generate
from codemods.upstream.kimi import linear as kimi

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PATCHED_RELEASES = ("0.5.18", "0.5.19", "0.5.20")
# 7 layers: PP=2 owns [0,3) [3,7), PP=3 owns [0,2) [2,4) [4,7); every stage captures.
SCENARIO = {
    "model": "kimi_linear",
    "layers": "classic",
    "num_layers": 7,
    "hidden_size": 4,
    "layer_ids": [6, 0, 3, 2],
    "tokens": [3, 0, 2],
    "timeout": 120,
}


def _check(root, runs, **options):
    return run_check("stage_check", dict(SCENARIO, runs=runs, **options), root, timeout=1200)


def _patched_copy(release, tmp_path):
    result = generate(release, models=["kimi_linear"])
    assert result.model("kimi_linear").status == kimi.NEEDS_PATCH
    check = git_apply(release, result.patch, check=True)
    assert check.returncode == 0, check.stderr
    copy = linked_copy(release, tmp_path / "sglang", result.changed)
    applied = git_apply(copy, result.patch)
    assert applied.returncode == 0, applied.stderr
    return result, copy


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_patched_release_matches_pp1_and_unpatched_loses_captures(
    sglang_release, tmp_path, version
):
    release = sglang_release(version)
    result, copy = _patched_copy(release, tmp_path)
    assert result.changed == [
        "sglang/srt/models/kimi_linear.py",
        "sglang/srt/layers/aux_hidden_states.py",
        # the runtime guard where the runner configures the capture, and the runner
        # passing it its PP size
        "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py",
        "sglang/srt/model_executor/model_runner.py",
    ]
    text = (copy / result.model("kimi_linear").path).read_text()
    assert "set_pp_aux_capture(" in text
    again = generate(copy, models=["kimi_linear"])
    assert again.model("kimi_linear").status == kimi.PATCHED and again.patch == ""
    # The cached release itself is untouched (hard-linked copy, patched files private).
    assert "PPAuxRelay" not in (release / result.model("kimi_linear").path).read_text()

    # The drive, then (in the same process) the same module through the PP validation
    # harness (ranks forked from its imports, scheduler-like loop with microbatches in
    # flight, PP=1 comparison, wire bytes vs analytic).
    patched = _check(copy, [{"pp": 2}, {"pp": 3}], harness_runs=[{"pp": 3}], harness_timeout=400)
    assert patched["module"].startswith(str(copy))
    for run in patched["runs"]:
        assert run.get("error") is None, run.get("error")
        assert run["ok"], run
        assert run["aux_counts"] == run["expected_counts"] == [4, 4, 4]

    harness = patched["harness"]
    assert harness["harness"] == "codemods.ppcheck"
    (run,) = harness["runs"]
    assert run["ok"] and run["status"] == "PASS", run

    unpatched = _check(release, [{"pp": 2}, {"pp": 3, "bypass_setter": True}])
    raised, bypassed = unpatched["runs"]
    assert not raised["ok"]
    assert "NotImplementedError: DSPARK aux hidden capture requires PP=1." in raised["error"]
    assert not bypassed["ok"]
    assert bypassed["aux_counts"] is not None
    assert all(
        got < want
        for got, want in zip(bypassed["aux_counts"], bypassed["expected_counts"], strict=False)
    )


@pytest.mark.timeout(300)
def test_release_0_5_21_is_reported_as_supported(sglang_release, tmp_path):
    release = sglang_release("0.5.21")
    out = tmp_path / "p.patch"
    body = tmp_path / "pr.md"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(release),
            "-o",
            str(out),
            "--pr-body",
            str(body),
            "--models",
            "kimi_linear",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    assert "already supports DSPARK aux capture under PP" in outcome.output
    assert "dspark_hidden_states" in outcome.output
    assert out.read_text() == ""
    # With the whole family, its relay's entry is renamed for every capture method
    # (tests/upstream/sizing/test_upstream_relay_rename_releases.py).
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(release), "-o", str(out)])
    assert outcome.exit_code == 0, outcome.output
    kimi_diff = out.read_text().split("diff --git a/sglang/srt/models/kimi_linear.py")[1]
    kimi_diff = kimi_diff.split("diff --git")[0]
    # ... and the relay itself goes through the shared helpers (one mechanism).
    assert '-            and "dspark_hidden_states" in pp_proxy_tensors.tensors' in kimi_diff
    assert "+        set_pp_aux_capture(" in kimi_diff


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_cli_patch_applies_on_release_and_compiles(sglang_release, tmp_path, version):
    release = sglang_release(version)
    out, body = tmp_path / "kimi.patch", tmp_path / "pr.md"
    outcome = CliRunner().invoke(
        cli, ["upstream-patch", str(release), "-o", str(out), "--pr-body", str(body)]
    )
    assert outcome.exit_code == 0, outcome.output
    patch = out.read_text()
    assert git_apply(release, patch, check=True).returncode == 0
    # The helpers go into the release's own aux-capture module (not a new file).
    glue = "sglang/srt/layers/aux_hidden_states.py"
    assert f"diff --git a/{glue} b/{glue}\nindex " in patch
    added = [
        line[1:]
        for line in patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    too_long = [line for line in added if len(line) > 88]
    assert not too_long, too_long
    changed = release_result(release).changed
    copy = linked_copy(release, tmp_path / "tree", changed)
    assert git_apply(copy, patch).returncode == 0
    for rel in changed:
        compile((copy / rel).read_text(), rel, "exec")
    text = body.read_text()
    assert text.startswith("# ")
    assert "DSPARK aux hidden capture requires PP=1." in text
    # SGLang's template, short; the caller-side ValueError is not this patch's to claim.
    sections = [
        "## Motivation",
        "## Modifications",
        "## Accuracy Tests",
        "## Benchmarking and Profiling",
        "## Checklist",
    ]
    assert [text.index(section) for section in sections] == sorted(
        text.index(section) for section in sections
    )
    assert len(text.splitlines()) <= 150
    assert "DSPARK requires explicit layer_ids for aux hidden capture." not in text
