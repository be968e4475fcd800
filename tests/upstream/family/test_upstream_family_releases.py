"""The family patch on the real SGLang 0.5.20 release.

The generated patch passes ``git apply --check`` on the release and applies to a copy.
In the patched copy the family test the patch ships (written next to the copy: a package
tree's patch leaves tests out) passes:
every patched model file is imported on CPU (with the stand-in modules), and its real
capture hooks and causal-LM forward run as 2 and 3 pipeline stages in separate processes
(gloo) with tiny stand-in decoder layers; the last stage's
aux states equal a PP=1 run (``torch.equal``).  The same drive on the release's own model
files shows the loss: fewer aux states than PP=1, or an error.
"""

from __future__ import annotations

import subprocess

import pytest
from sglang_support import warm
from sglang_support.family_check import (
    family_test_path,
    patched_copy,
    run_family_tests,
    shipped_test_env,
    unpatched_copy,
)

from codemods.upstream.validation.shipped_tests import TEST_FILE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

VERSION = "0.5.20"
#: Models the brief names; each must be patched, validated, and show the loss unpatched.
REQUIRED = ("llama", "qwen2", "qwen3", "qwen3_moe", "deepseek_v2")
#: Models of the other shapes, which must show the loss unpatched too: DSpark captures
#: after the layer (one under a condition, one with its own ids name), a hook calling a
#: missing stack setter, a forward unpacking non-last stages' output.
OTHER_SHAPES = ("bailing_moe_v3", "deepseek_v4", "qwen3_vl", "mimo_v2")


@pytest.fixture(scope="module")
def patched(sglang_release, tmp_path_factory):
    release = sglang_release(VERSION)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("family") / "patched")
    return release, result, copy


def test_patch_covers_the_family_and_applies(patched):
    release, result, copy = patched
    decisions = result.family.decisions
    for name in REQUIRED:
        assert decisions[f"{name}.py"].patched, decisions[f"{name}.py"].reason
    with_early = [d for d in decisions.values() if d.early_return]
    patched_files = [d for d in with_early if d.patched]
    assert len(patched_files) >= 23, [d.file for d in patched_files]
    # Every file with an early-return hook that the patch leaves alone belongs to a
    # model that refuses PP in its constructor: none of them can lose a capture.
    for decision in with_early:
        assert decision.patched or decision.reason.startswith(
            "the model refuses PP in its constructor"
        ), (decision.file, decision.reason)
    # The shapes beyond the common one: captures after the layer under a condition
    # (DSpark), ids under another name, a missing stack setter, a forward that
    # unpacked non-last stages' output.
    assert decisions["bailing_moe_v3.py"].capture_kinds == ("after-layer",)
    assert decisions["deepseek_v4.py"].patched
    assert decisions["qwen3_vl.py"].fixes and decisions["mimo_v2.py"].fixes
    assert result.changed.count("sglang/srt/layers/aux_hidden_states.py") == 1
    # A package tree: the tests are shipped, but not written into the package; their
    # utilities are a module of it.
    assert TEST_FILE in result.tests and result.tests_left_out
    assert [path for path in result.changed if "/test/" in path] == [
        "sglang/test/pp_aux_capture_family_models.py"
    ]
    # Applied: the copy carries the rewrite, the cached release does not.
    llama = "sglang/srt/models/llama.py"
    assert "set_pp_aux_capture" in (copy / llama).read_text()
    assert "set_pp_aux_capture" not in (release / llama).read_text()


@pytest.mark.timeout(2400)
def test_generated_family_test_passes_in_the_patched_tree(patched):
    _, result, copy = patched
    test = family_test_path(copy, result)
    source = test.read_text()
    for name in REQUIRED:
        assert f'        "{name}",\n' in source, name
    proc = warm.run([str(test), "-v"], cwd=copy, env=shipped_test_env(copy), timeout=2300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "Ran 2 tests" in proc.stderr and "OK" in proc.stderr.splitlines()[-1]
    assert "skipped" not in proc.stderr


@pytest.mark.timeout(1800)
def test_unpatched_models_lose_captures_under_pp(patched, tmp_path):
    release, result, _ = patched
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    shown = [*REQUIRED, *OTHER_SHAPES]
    runs = run_family_tests(baseline, result, (2, 3), shown, timeout=1700)
    assert sorted(runs) == [2, 3]
    for pp_size, records in runs.items():
        assert {record["pp"] for record in records} == {pp_size}
        seen = {record["model"] for record in records}
        assert seen == set(shown)
        for record in records:
            lost = record["error"] is not None or any(
                got < want
                for got, want in zip(record["pipelined"], record["reference"], strict=False)
            )
            assert lost and not record["equal"], record


def test_patch_check_passes_on_the_release_tree(patched):
    release, result, _ = patched
    proc = subprocess.run(
        ["git", "apply", "--check"],
        cwd=release,
        input=result.patch,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
