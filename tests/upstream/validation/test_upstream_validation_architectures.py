"""The architectures the result reports are the ones the patched tree's own rule admits.

The PR description and the validation commit count and list ``result.validation.architectures``
("N architectures in the patched files").  On a patched copy of SGLang 0.5.23, the shipped
``relays_pp_aux_capture`` is asked about every class of the ``EntryClass`` of every patched
model file (``sglang_support.validation_check --relays``): the classes it admits, and for which methods,
are exactly the reported ones.  That includes ``GlmMoeDsaForCausalLM`` (``glm4_moe.py``),
which inherits ``DeepseekV2ForCausalLM``'s declaration from ``deepseek_v2.py`` and which a
count of in-file subclasses only left out.
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
    assert reported == admitted, (set(reported) ^ set(admitted), reported, admitted)
    # Declared in deepseek_v2.py, inherited across files.
    assert reported["GlmMoeDsaForCausalLM"] == reported["DeepseekV2ForCausalLM"]
