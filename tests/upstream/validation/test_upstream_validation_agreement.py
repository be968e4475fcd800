"""Validation and the runtime guard give the same verdict on every architecture.

On a patched copy of SGLang 0.5.23, every architecture the model registry holds is asked,
for each capture method the patch relays under PP (EAGLE3, DFLASH, DSPARK), by the patched
server-argument check (``_check_pp_aux_capture_supported``: the hook's table, else the class
the loader resolves) and by the runner (``configure_aux_hidden_state_capture`` with
``pp_size=2`` on that class, hooks replaced by recorders: the guard, then the hook the
runner picks, DSPARK falling back to the DFLASH hook where the class has no DSPARK hook).
Admitted by one means admitted by the other (``sglang_support.validation_check
--verdicts``).
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
METHODS = ("EAGLE3", "DFLASH", "DSPARK")
#: Registered classes that are no ``nn.Module``: they build the module of the checkpoint's
#: version, so the runner's verdict cannot be asked without a checkpoint.
DISPATCHERS = {
    "MiniCPMV",
    "MiniCPMV4_6ForConditionalGeneration",
    "MiniCPMV4_7ForConditionalGeneration",
}


def _verdicts(root, archs=None) -> dict[str, dict[str, list[str]]]:
    spec = json.dumps({"archs": archs, "methods": list(METHODS)})
    proc = run_python(
        ["-m", "sglang_support.validation_check", "--verdicts", spec], root, timeout=900
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    _result, copy = patched_copy(sglang_tree(RELEASE), tmp_path_factory.mktemp("agree"))
    return _verdicts(copy)


def _admitted(verdict: str) -> bool:
    return verdict == "admitted"


def test_every_registered_architecture_gets_one_verdict(verdicts):
    assert len(verdicts) > 200
    differ = {
        (arch, method): pair
        for arch, found in verdicts.items()
        for method, pair in found.items()
        if arch not in DISPATCHERS and _admitted(pair[0]) != _admitted(pair[1])
    }
    assert not differ, differ
    errors = {
        (arch, method): pair
        for arch, found in verdicts.items()
        for method, pair in found.items()
        if any(verdict.startswith("error") for verdict in pair)
    }
    assert not errors, errors
    # The check is live: each method is admitted for some architectures, refused for others.
    for method in METHODS:
        admitted = {arch for arch, found in verdicts.items() if _admitted(found[method][0])}
        assert admitted and len(admitted) < len(verdicts), method


def test_a_class_without_a_module_instance_is_refused_by_validation(verdicts):
    for arch in DISPATCHERS:
        for method in METHODS:
            validation, runtime = verdicts[arch][method]
            assert runtime.startswith("not a module:"), (arch, method, runtime)
            assert validation.startswith(f"refused: {arch} cannot capture"), validation
    assert {
        arch for arch, found in verdicts.items() if found["EAGLE3"][1].startswith("not a module")
    } == DISPATCHERS


def test_llama_dspark_is_admitted_by_both_through_its_dflash_hook(verdicts):
    """LlamaForCausalLM has no DSPARK hook: the runner configures DSPARK through its DFLASH
    hook, which the patch rewrites, and validation says the same."""
    assert verdicts["LlamaForCausalLM"]["DSPARK"] == ["admitted", "admitted"]
    # A DSPARK target whose DFLASH hook does not relay (beam.py, which the patch leaves
    # alone) is refused by both, the guard naming the DFLASH hook the runner would call.
    validation, runtime = verdicts["BeamForCausalLM"]["DSPARK"]
    assert validation.startswith("refused: BeamForCausalLM cannot capture DSPARK"), validation
    assert runtime.startswith("refused: BeamForCausalLM's decoder stack does not relay DFLASH's"), (
        runtime
    )
