"""Validation and the runtime guard give the same verdict on every architecture.

On a patched copy of SGLang 0.5.23, every architecture the model registry holds is asked,
for each capture method the patch relays under PP (EAGLE3, DFLASH, DSPARK), by the patched
server-argument check (``_check_pp_aux_capture_supported``: the hook's table, else the class
the loader resolves) and by the runner (``configure_aux_hidden_state_capture`` with
``pp_size=2`` on that class, hooks replaced by recorders: the guard, then the hook the
runner picks, DSPARK falling back to the DFLASH hook where the class has no DSPARK hook).
Admitted by one means admitted by the other (``sglang_support.validation_check
--verdicts``).

The runner's check is asked of a model built without ``__init__``, with its hooks replaced
by recorders, so no hook gives a decoder stack a relay and the guard asks the class
(``relays_pp_aux_capture``).  Where the hook does give one, the guard asks that stack, which
only the constructor builds: for every architecture validation admits while the class is
refused, the runner is asked again with the real hooks and guard on the model assembled
with the classes its constructors build along the hook's attributes (the stacks
``codemods.upstream.validation.stacks`` resolves in the patched copy's model files), and
must admit it (``validation_check --stacks``).
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_check, run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.validation import stacks
from codemods.upstream.validation.model_classes import ModelClasses

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
def patched(tmp_path_factory):
    return patched_copy(sglang_tree(RELEASE), tmp_path_factory.mktemp("agree"))[1]


@pytest.fixture(scope="module")
def verdicts(patched):
    return _verdicts(patched)


def _dotted(key: tuple[str, str]) -> str:
    return f"{key[0].removesuffix('.py').replace('/', '.')}.{key[1]}"


def _assembled_spec(classes: ModelClasses, arch: str, method: str) -> dict | None:
    """The ``--stacks`` case of ``arch`` (an ``EntryClass`` member) for ``method``: the
    classes its constructors build along the attributes its hook reaches (None: cannot be
    told)."""
    key = next(
        (
            found
            for rel in sorted(
                p.relative_to(classes.models_dir).as_posix()
                for p in classes.models_dir.rglob("*.py")
            )
            if (module := classes.module(rel)) is not None
            and arch in module.entry
            and (found := classes.resolve(rel, arch)) is not None
        ),
        None,
    )
    if key is None:
        return None
    hook = f"set_{method.lower()}_layers_to_capture"
    if method == "DSPARK" and stacks.hook_parts(classes, key, hook) is None:
        hook = "set_dflash_layers_to_capture"  # the runner calls it for DSPARK then
    found = stacks.hook_parts(classes, key, hook)
    if found is None or not found.stacks:
        return None
    return {
        "class": _dotted(key),
        "parts": {path: _dotted(cls) for path, cls in found.parts.items() if path},
        "stacks": list(found.stacks),
        "method": method,
    }


def _check_stacks(root, cases: dict[str, dict]) -> dict[str, str]:
    return run_check("validation_check", cases, root, timeout=600, mode="--stacks")


def _admitted(verdict: str) -> bool:
    return verdict == "admitted"


def test_every_registered_architecture_gets_one_verdict(verdicts, patched):
    assert len(verdicts) > 200
    differ = {
        (arch, method): pair
        for arch, found in verdicts.items()
        for method, pair in found.items()
        if arch not in DISPATCHERS and _admitted(pair[0]) != _admitted(pair[1])
    }
    # Admitted by the stack the hook sets up: the runner asked again on the model assembled.
    by_stack = {case: pair for case, pair in differ.items() if _admitted(pair[0])}
    classes = ModelClasses(patched / "sglang" / "srt" / "models")
    cases = {
        f"{arch}/{method}": _assembled_spec(classes, arch, method) for arch, method in by_stack
    }
    assert all(cases.values()), cases
    assembled = _check_stacks(patched, cases) if cases else {}
    assert all(outcome == "admitted" for outcome in assembled.values()), {
        case: outcome for case, outcome in assembled.items() if outcome != "admitted"
    }
    differ = {case: pair for case, pair in differ.items() if case not in by_stack}
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
