"""The runtime guard admits a model by the decoder stack its capture hook relays through.

What relays captures across pipeline stages is the decoder stack's ``forward``; the patch
declares ``pp_aux_relay_methods`` on the stack classes whose forward it rewrites, and the
guard asks, right after the hook ran, the stack the hook gave a relay to.  On a patched
copy of SGLang 0.5.23, SGLang's own ``configure_aux_hidden_state_capture`` runs the real
hooks under 2 PP stages on models assembled as their ``__init__`` builds them
(``sglang_support.validation_check --stacks``):

* classes that keep a patched stack while the causal-LM class is another: the text
  ``Qwen3_5MoeForCausalLM`` (a subclass with its own ``__init__`` over the
  ``Qwen3_5MoeForCausalLM`` stack of ``qwen3_5.py``), the ``Qwen3_5*ForConditionalGeneration``
  classes (``Qwen3VLForConditionalGeneration``'s hooks over the ``qwen3_5.py`` stacks) and
  ``KimiK25ForConditionalGeneration`` (delegates to ``DeepseekV3ForCausalLM``, whose stack
  is ``DeepseekV2Model``) are admitted;
* ``Llama4ForCausalLM`` (``llama4.py``, which the patch never touches) inherits
  ``LlamaForCausalLM``'s rewritten hook but builds its own ``Llama4Model``, whose forward
  does not relay: refused, naming the class, the stack, the method and why;
* the ``qwen3_5.py`` stack relays what the hooks rewritten for it declare (EAGLE3), so
  DFLASH through ``Qwen3VLForConditionalGeneration``'s hook is refused with that reason.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
_QWEN35_STACK = {"parts": {"model": "qwen3_5.Qwen3_5ForCausalLM"}, "stacks": ["model"]}
_QWEN35_MOE_STACK = {"parts": {"model": "qwen3_5.Qwen3_5MoeForCausalLM"}, "stacks": ["model"]}
_DEEPSEEK = {
    "parts": {
        "language_model": "deepseek_v2.DeepseekV3ForCausalLM",
        "language_model.model": "deepseek_v2.DeepseekV2Model",
    },
    "stacks": ["language_model.model"],
}
ADMITTED = {
    "qwen3_5_moe_text": {
        "class": "qwen3_5_text.Qwen3_5MoeForCausalLM",
        **_QWEN35_MOE_STACK,
        "method": "EAGLE3",
    },
    "qwen3_5_cg": {
        "class": "qwen3_5.Qwen3_5ForConditionalGeneration",
        **_QWEN35_STACK,
        "method": "EAGLE3",
    },
    "qwen3_5_moe_cg": {
        "class": "qwen3_5.Qwen3_5MoeForConditionalGeneration",
        **_QWEN35_MOE_STACK,
        "method": "EAGLE3",
    },
    "kimi_k25_eagle3": {
        "class": "kimi_k25.KimiK25ForConditionalGeneration",
        **_DEEPSEEK,
        "method": "EAGLE3",
    },
    "kimi_k25_dflash": {
        "class": "kimi_k25.KimiK25ForConditionalGeneration",
        **_DEEPSEEK,
        "method": "DFLASH",
    },
}
_LOST = "so pp_size=2 would lose the captures of every stage but the last."
REFUSED = {
    "llama4_own_stack": (
        {
            "class": "llama4.Llama4ForCausalLM",
            "parts": {"model": "llama4.Llama4Model"},
            "stacks": ["model"],
            "method": "EAGLE3",
        },
        "Llama4ForCausalLM's decoder stack Llama4Model does not relay EAGLE3's aux hidden "
        "states across pipeline stages (Llama4Model.forward is not patched to relay "
        f"captures), {_LOST}",
    ),
    "qwen3_5_cg_dflash": (
        {"class": "qwen3_5.Qwen3_5ForConditionalGeneration", **_QWEN35_STACK, "method": "DFLASH"},
        "Qwen3_5ForConditionalGeneration's decoder stack Qwen3_5ForCausalLM does not relay "
        "DFLASH's aux hidden states across pipeline stages (Qwen3_5ForCausalLM.forward "
        f"relays only EAGLE3), {_LOST}",
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, str]:
    _result, copy = patched_copy(sglang_tree(RELEASE), tmp_path_factory.mktemp("stacks"))
    cases = {**ADMITTED, **{name: spec for name, (spec, _) in REFUSED.items()}}
    proc = run_python(
        ["-m", "sglang_support.validation_check", "--stacks", json.dumps(cases)],
        copy,
        timeout=600,
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("case", sorted(ADMITTED))
def test_a_class_that_keeps_a_patched_stack_is_admitted(outcomes, case):
    assert outcomes[case] == "admitted"


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_stack_that_does_not_relay_is_refused_with_its_reason(outcomes, case):
    assert outcomes[case] == f"refused: {REFUSED[case][1]}"
