"""The family patch on SGLang releases before 0.5.18 (0.5.3, 0.5.10, 0.5.14: the layer loop
that hands ``PPProxyTensors({...})`` on), each imported with the transformers release it
pins (``Requires-Dist`` in its wheel's ``METADATA``; ``sglang_support.release_deps``: one
cached site directory per transformers release, torch never installed again).

For the dense (llama, qwen2, qwen3) and MoE (qwen2_moe, qwen3_moe) families, the patch of
those models applies to a copy of the release, and the family test it ships drives the
real causal-LM and decoder-stack classes of the copy as 2 and 3 pipeline stages across
gloo processes (``family_runner --server-defaults``): the last stage's aux hidden states
equal (``torch.equal``, same count) those of a PP=1 run of the same model.  The release's
own model files, driven the same way, lose captures.
"""

from __future__ import annotations

import pytest
from sglang_support.env import run_python
from sglang_support.family_check import (
    patched_copy,
    run_family_tests,
    stand_in_ci_register,
    unpatched_copy,
    validated_models,
)
from sglang_support.release_deps import pinned_transformers, release_paths

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1800)]

RELEASES = ("0.5.3", "0.5.10", "0.5.14")
DENSE = ("llama", "qwen2", "qwen3")
MOE = ("qwen2_moe", "qwen3_moe")
MODELS = [*DENSE, *MOE]


@pytest.fixture(scope="module", params=RELEASES)
def release(request, sglang_release, tmp_path_factory):
    """(version, the release tree, the patch's result, the patched copy, PYTHONPATH head)."""
    version = request.param
    tree = sglang_release(version)
    result, copy = patched_copy(tree, tmp_path_factory.mktemp("old") / version, MODELS)
    stand_in_ci_register(copy)
    return version, tree, result, copy, release_paths(version)


def _drive(copy, result, paths, pp_sizes=(2, 3)):
    return run_family_tests(
        copy, result, pp_sizes, MODELS, timeout=1700, extra_paths=paths, server_defaults=True
    )


def test_each_release_imports_the_transformers_it_pins(release):
    version, _, _, copy, paths = release
    proc = run_python(
        ["-c", "import transformers; print(transformers.__version__)"],
        copy,
        extra_paths=paths,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == pinned_transformers(version)


def test_patched_stages_equal_pp1_for_the_dense_and_moe_families(release):
    version, _, result, copy, paths = release
    for name in MODELS:
        decision = result.family.decisions[f"{name}.py"]
        assert decision.patched, (version, name, decision.reason)
    runs = _drive(copy, result, paths)
    assert sorted(runs) == [2, 3]
    for pp_size, records in runs.items():
        assert {record["pp"] for record in records} == {pp_size}
        assert validated_models(records) == dict.fromkeys(MODELS, True), records
        for record in records:
            assert record["reference"] and all(record["reference"]), record
            assert record["pipelined"] == record["reference"], record


def test_the_release_files_lose_captures_under_pp(release, tmp_path):
    _, tree, result, _, paths = release
    baseline = unpatched_copy(tree, tmp_path / "unpatched", result)
    stand_in_ci_register(baseline)
    # 3 stages, where every stage owns captures; the patched drive also runs 2.
    runs = _drive(baseline, result, paths, pp_sizes=(3,))
    assert sorted(runs) == [3]
    for records in runs.values():
        assert {record["model"] for record in records} == set(MODELS)
        for record in records:
            lost = record["error"] is not None or any(
                got < want
                for got, want in zip(record["pipelined"], record["reference"], strict=False)
            )
            assert lost and not record["equal"], record
