"""The patched validation names the class, the method and the reason of each PP refusal.

On a copy of SGLang 0.5.23 with the patch for llama (whose EAGLE3 and DFLASH hooks it
rewrites), qwen3_next (whose constructor refuses PP: the patch only drops the early return
of its hooks) and gemma3_causal (whose model code never reads a PP rank or a stage's
layers), SGLang's own ``check_pipeline_parallel_compat`` refuses EAGLE3 with ``pp_size=2``
on PD prefill with exactly ``"<class> cannot capture EAGLE3 aux hidden states with
--pp-size 2: <reason>"`` for one class of each reason: ``Qwen3NextForCausalLM`` (its
constructor refuses PP), ``Gemma3ForCausalLM`` (it never splits its layers),
``--model-impl transformers`` (the Transformers backend's class: no capture hooks),
``KimiLinearForCausalLM`` and ``Llama4ForCausalLM`` (a stack the patch does not make
relay).  The reasons come from the generator's plan (``result.validation`` has no table of
its own: the hook's text holds it), so the test also checks the reasons table against the
family decisions.  It accepts ``LlamaForCausalLM`` without importing any model module (the
registry imports every model), and ``MistralForCausalLM`` (``mistral.py``, which the patch
leaves alone, keeps ``llama.py``'s stack) likewise; ``Llama4ForCausalLM``, which the hook's
table does not list, is resolved through the registry.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.validation import refusals
from codemods.upstream.validation.relax import METHODS_TABLE, MODULE, REASONS_TABLE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
MODELS = ["llama", "qwen3_next", "gemma3_causal"]
PREFILL = dict(speculative_algorithm="EAGLE3", disaggregation_mode="prefill")
#: case -> (server-args fields, the class the message names, the reason it gives)
REFUSED = {
    "constructor": (dict(arch="Qwen3NextForCausalLM"), "Qwen3NextForCausalLM", refusals.REFUSES_PP),
    "no_split": (dict(arch="Gemma3ForCausalLM"), "Gemma3ForCausalLM", refusals.NO_PP_SPLIT),
    "transformers": (
        dict(arch="LlamaForCausalLM", model_impl="transformers"),
        "TransformersForCausalLM",
        refusals.TRANSFORMERS,
    ),
    "other_file": (
        dict(arch="KimiLinearForCausalLM"),
        "KimiLinearForCausalLM",
        refusals.NOT_RELAYED,
    ),
    "own_stack": (dict(arch="Llama4ForCausalLM"), "Llama4ForCausalLM", refusals.NOT_RELAYED),
}


def _pp(root, cases: dict[str, dict]) -> dict[str, dict]:
    """``check_pipeline_parallel_compat`` on ``cases`` in one fresh process, in order."""
    cases = {name: {**PREFILL, **fields} for name, fields in cases.items()}
    proc = run_python(
        ["-m", "sglang_support.validation_check", "--pp", json.dumps(cases)], root, timeout=600
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    return patched_copy(sglang_tree(RELEASE), tmp_path_factory.mktemp("refusals"), models=MODELS)


def test_each_refusal_names_the_class_the_method_and_its_reason(patched):
    _result, copy = patched
    found = _pp(copy, {name: fields for name, (fields, _, _) in REFUSED.items()})
    for name, (_fields, model_cls, reason) in REFUSED.items():
        expected = (
            f"refused: {model_cls} cannot capture EAGLE3 aux hidden states with "
            f"--pp-size 2: {reason}"
        )
        assert found[name]["outcome"] == expected, (name, found[name])


def test_the_reasons_are_the_plans(patched):
    """The constructor refusal is the family plan's decision for qwen3_next.py; gemma3 is
    left alone for having no hook that returns early; llama relays."""
    result, _copy = patched
    decisions = result.family.decisions
    assert decisions["qwen3_next.py"].dead_returns and not decisions["qwen3_next.py"].patched
    assert not decisions["gemma3_causal.py"].patched
    change = next(c for c in result.changes if c.path == result.tree.module_path(MODULE))
    assert f"{REASONS_TABLE} = {{\n" in change.new
    table = change.new.split(f"{REASONS_TABLE} = {{\n", 1)[1].split("}", 1)[0]
    assert '    "Qwen3NextForCausalLM": _REFUSES_PP,\n' in table
    assert '    "Gemma3ForCausalLM": _NO_PP_SPLIT,\n' in table
    assert "LlamaForCausalLM" not in table
    relaying = change.new.split(f"{METHODS_TABLE} = {{\n", 1)[1].split("}", 1)[0]
    # DSPARK: Llama has no DSPARK hook, and the runner calls its DFLASH hook for DSPARK.
    assert '    "LlamaForCausalLM": ("DFLASH", "DSPARK", "EAGLE3"),\n' in relaying
    assert "Qwen3Next" not in relaying and "Gemma3" not in relaying


def test_a_relaying_architecture_is_checked_without_model_code(patched):
    _result, copy = patched
    found = _pp(copy, {"llama": dict(arch="LlamaForCausalLM")})
    assert found["llama"] == {"outcome": "accepted", "registry": False, "models": 0}, found
    # A class of a file the patch leaves alone that keeps llama.py's stack is listed too.
    found = _pp(copy, {"mistral": dict(arch="MistralForCausalLM")})
    assert found["mistral"] == {"outcome": "accepted", "registry": False, "models": 0}, found
    # An architecture the table does not list is resolved as the model loader does.
    found = _pp(copy, {"llama4": dict(arch="Llama4ForCausalLM")})
    assert found["llama4"]["outcome"].startswith("refused: Llama4ForCausalLM"), found
    assert found["llama4"]["registry"] is True, found
