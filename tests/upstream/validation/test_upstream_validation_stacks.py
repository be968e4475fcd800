"""The patched validation admits by the decoder stack a class's capture hook sets up.

On a copy of SGLang 0.5.23 with the whole patch applied, SGLang's own
``check_pipeline_parallel_compat`` (EAGLE3 on PD prefill, ``pp_size=2``) and the patched
hook's check ``_check_pp_aux_capture_supported`` (EAGLE3 and DFLASH) agree with the runtime
guard (``test_upstream_stack_admission.py``):

* the classes that keep a patched stack while their causal-LM class is another are
  admitted: ``Qwen3_5MoeForCausalLM`` (``self.model = self.body_cls(...)``, the class
  attribute its subclass sets), the ``Qwen3_5*ForConditionalGeneration`` classes (a
  ``language_model_cls`` default passed through ``super().__init__`` into Qwen3-VL's
  ``self.model = language_model_cls(...)``) and ``KimiK25ForConditionalGeneration`` (its
  hooks delegate to ``DeepseekV3ForCausalLM``, whose stack is ``DeepseekV2Model``), the
  latter for DFLASH too;
* ``Llama4ForCausalLM`` inherits ``LlamaForCausalLM``'s rewritten hooks and ``__init__``,
  but its factory method (``self._init_model``) builds ``Llama4Model`` from ``llama4.py``,
  which the patch never touches: refused, naming the class, the method and the reason;
* ``Llama4ForConditionalGeneration`` (``mllama4.py``) delegates its EAGLE3 hook to the
  ``Llama4ForCausalLM`` its constructor imports and builds: refused likewise;
* the ``qwen3_5.py`` stack relays only EAGLE3, so DFLASH through the Qwen3.5 wrappers is
  refused.

The architectures are answered from the hook's table, without importing a model.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.validation import refusals

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
PREFILL = dict(speculative_algorithm="EAGLE3", disaggregation_mode="prefill")
WRAPPERS = [
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "KimiK25ForConditionalGeneration",
]
OWN_STACK = "Llama4ForCausalLM"
#: Delegates its hooks to the Llama4ForCausalLM its constructor imports and builds.
DELEGATES_TO_OWN_STACK = "Llama4ForConditionalGeneration"


def _check(root, mode: str, spec) -> dict:
    proc = run_python(
        ["-m", "sglang_support.validation_check", mode, json.dumps(spec)], root, timeout=600
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    _result, root = patched_copy(sglang_tree(RELEASE), tmp_path_factory.mktemp("stacks"))
    return root


def _refused(arch: str, method: str) -> str:
    return (
        f"refused: {arch} cannot capture {method} aux hidden states with --pp-size 2: "
        f"{refusals.NOT_RELAYED}"
    )


def test_sglangs_pp_check_admits_the_wrappers_and_refuses_a_stack_it_does_not_patch(copy):
    cases = {arch: {**PREFILL, "arch": arch} for arch in [*WRAPPERS, OWN_STACK]}
    found = _check(copy, "--pp", cases)
    for arch in WRAPPERS:
        # From the hook's table: no model module imported.
        assert found[arch] == {"outcome": "accepted", "registry": False, "models": 0}, arch
    assert found[OWN_STACK]["outcome"] == _refused(OWN_STACK, "EAGLE3"), found[OWN_STACK]


def test_the_capture_check_answers_per_method_by_the_stack(copy):
    spec = {
        "archs": [*WRAPPERS, OWN_STACK, DELEGATES_TO_OWN_STACK],
        "methods": ["EAGLE3", "DFLASH"],
    }
    verdicts = _check(copy, "--verdicts", spec)
    validation = {
        arch: {m: pair[0] for m, pair in found.items()} for arch, found in verdicts.items()
    }
    for arch in WRAPPERS:
        assert validation[arch]["EAGLE3"] == "admitted", (arch, validation[arch])
    assert validation["KimiK25ForConditionalGeneration"]["DFLASH"] == "admitted"
    for arch in ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"):
        assert validation[arch]["DFLASH"] == _refused(arch, "DFLASH")
    for method in ("EAGLE3", "DFLASH"):
        assert validation[OWN_STACK][method] == _refused(OWN_STACK, method)
    eagle3 = validation[DELEGATES_TO_OWN_STACK]["EAGLE3"]
    assert eagle3 == _refused(DELEGATES_TO_OWN_STACK, "EAGLE3"), eagle3
