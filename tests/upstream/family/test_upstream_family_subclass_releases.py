"""Subclasses that inherit a patched class's capture hooks but build a decoder stack of their
own, on real SGLang releases.

``Qwen3VLMoeForConditionalGeneration`` (``qwen3_vl_moe.py``) inherits the hooks of
``Qwen3VLForConditionalGeneration`` and builds ``Qwen3MoeLLMModel`` through
``language_model_cls``; the relay declaration of its base does not cover it (it defines
``__init__``).  The patch rewrites that stack's forward (the layer loop that appends on
0.5.20, the callback picked in each layer call on 0.5.23) and gives the class its own
``pp_aux_relay_methods``, naming the methods whose inherited hooks then relay.  The family
test the patch ships drives the real classes of the patched copy, with tiny stand-in
layers, as 2 and 3 pipeline stages across gloo processes under the transformers each
release pins: the last stage's aux hidden states equal a PP=1 run.  The release's own files
lose captures under the same drive.

``Qwen4ExpForConditionalGeneration`` (0.5.20+) stays refused: its stack's forward
(``Qwen4ExpVLModel.forward``) reads no capture ids, and the forward it calls returns
``hidden_states, hc_hidden_states`` in place of the captures outside idle batches, so aux
capture is lost even with PP=1.  ``Llama4ForCausalLM`` stays refused: its stack's layer
loop is not split by PP stage.
"""

from __future__ import annotations

import pytest
from sglang_support.family_check import (
    patched_copy,
    run_family_tests,
    unpatched_copy,
    validated_models,
)

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.20", "0.5.23")
MODELS = ["qwen3_vl", "qwen3_vl_moe"]
SUBCLASS = "Qwen3VLMoeForConditionalGeneration"


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("subclass") / version, MODELS)
    return version, release, result, copy


def test_the_subclass_stack_is_patched_and_declares_its_relay(patched):
    version, release, result, copy = patched
    decision = result.family.decisions["qwen3_vl_moe.py"]
    assert decision.patched, decision.reason
    assert decision.inherits == "qwen3_vl.py:Qwen3VLForConditionalGeneration"
    assert decision.hooks == () and decision.early_return == ()
    assert str(decision.forward) == "qwen3_vl_moe.py:Qwen3MoeLLMModel.forward"
    (case,) = decision.cases
    assert case[:2] == (SUBCLASS, "Qwen3MoeLLMModel")
    assert set(case[2]) == {"set_eagle3_layers_to_capture", "set_dflash_layers_to_capture"}
    rel = "sglang/srt/models/qwen3_vl_moe.py"
    text, old = (copy / rel).read_text(), (release / rel).read_text()
    head = f"class {SUBCLASS}(Qwen3VLForConditionalGeneration):\n"
    assert head + '    pp_aux_relay_methods = ("EAGLE3", "DFLASH")\n\n' in text
    assert "pp_aux_relay_methods" not in old
    # 0.5.20 hands ``PPProxyTensors({...})`` on, 0.5.23 ``residual_batch.to_pp(...)``.
    assert "pp_aux_outgoing(self" in text or "return pp_aux_handoff(" in text
    assert "pp_aux_collect(self" in text
    # The inherited hooks and width method are not copied into the subclass.
    assert "def set_eagle3_layers_to_capture" not in text
    assert "def get_pp_proxy_aux_hidden_size" not in text
    compile(text, rel, "exec")


def test_the_subclasses_that_cannot_relay_say_why(sglang_release):
    from codemods.upstream.generate import generate

    result = generate(sglang_release("0.5.23"))
    decisions = result.family.decisions
    qwen4 = decisions["qwen4_exp.py"]
    assert not qwen4.patched
    assert "builds its stack from Qwen4ExpVLModel" in qwen4.reason
    assert "Qwen4ExpVLModel.forward does not read the capture ids" in qwen4.reason
    assert "`return hidden_states, hc_hidden_states` in place of the captures" in qwen4.reason
    llama4 = decisions["llama4.py"]
    assert not llama4.patched and "builds its stack from Llama4Model" in llama4.reason
    for decision in (qwen4, llama4):
        assert decision.reason.endswith("aux capture under PP stays refused for it")
        assert decision.file not in {c.path.rsplit("/", 1)[-1] for c in result.changes}
    assert decisions["qwen3_vl_moe.py"].patched


@pytest.mark.timeout(1200)
def test_patched_stages_equal_pp1(patched):
    version, _, result, copy = patched
    runs = run_family_tests(copy, result, (2, 3), MODELS, timeout=1100)
    assert sorted(runs) == [2, 3]
    for pp_size, records in runs.items():
        assert {record["pp"] for record in records} == {pp_size}
        assert validated_models(records) == dict.fromkeys(MODELS, True), records
        mine = [r for r in records if r["model"] == "qwen3_vl_moe"]
        assert mine and all(r["reference"] for r in mine), mine


@pytest.mark.timeout(1200)
def test_the_release_subclass_loses_captures(patched, tmp_path):
    version, release, result, _ = patched
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    runs = run_family_tests(baseline, result, (2, 3), ["qwen3_vl_moe"], timeout=1100)
    for records in runs.values():
        assert records and validated_models(records) == {"qwen3_vl_moe": False}, records
