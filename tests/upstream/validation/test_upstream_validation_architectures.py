"""The architectures the result reports include every one the patched tree's class rule admits.

The PR description and the validation commit count and list ``result.validation.architectures``.
On a patched copy of SGLang 0.5.23, the shipped ``relays_pp_aux_capture`` is asked about
every class of the ``EntryClass`` of every patched model file
(``sglang_support.validation_check --relays``): each class it admits (it keeps the
declaring class's constructor and hook, so its stack) is reported, for the same methods.
That includes ``GlmMoeDsaForCausalLM`` (``glm4_moe.py``), which inherits
``DeepseekV2ForCausalLM``'s declaration from ``deepseek_v2.py``.  The report also holds the
classes admitted by the decoder stack their hooks set up although their class declares
nothing (the wrappers of ``test_upstream_validation_stacks.py``), and not
``Llama4ForCausalLM``, whose stack the patch leaves alone.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def test_reported_architectures_are_those_the_runtime_rule_admits(tmp_path):
    result, copy = patched_copy(sglang_tree("0.5.23"), tmp_path / "patched")
    stems = [file.removesuffix(".py") for file in result.family.patched]
    proc = run_python(
        ["-m", "sglang_support.validation_check", "--relays", ",".join(stems)], copy, timeout=900
    )
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    admitted = {arch: tuple(methods) for arch, methods in json.loads(lines[-1]).items()}
    reported = result.validation.architectures
    assert {arch: reported.get(arch) for arch in admitted} == admitted, (reported, admitted)
    wrappers = {
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "KimiK25ForConditionalGeneration",
    }
    assert wrappers <= set(reported) - set(admitted), reported
    assert "Llama4ForCausalLM" not in reported
    # Declared in deepseek_v2.py, inherited across files.
    assert reported["GlmMoeDsaForCausalLM"] == reported["DeepseekV2ForCausalLM"]
