"""The relaxed server-arg validation on the real SGLang 0.5.21-0.5.23 wheels.

The patch for llama (whose EAGLE3 and DFLASH hooks it rewrites) passes ``git apply
--check`` on the release and is applied to a copy.  The real ``check_pipeline_parallel_compat``
of the patched copy, imported on CPU, accepts EAGLE3 with PP on EAGLE's two paths
(``SGLANG_ENABLE_PP_SPEC`` and PD prefill) for a Llama target, and for a Mistral target
(``MistralForCausalLM(LlamaForCausalLM)`` in ``mistral.py``, a file the patch does not touch:
the hook's table lists it, since it keeps the patched class's constructor and hooks and so
its stack); every
other refusal still refuses (another target model, ``Llama4ForCausalLM(LlamaForCausalLM)``
with its own stack, the Transformers backend (``--model-impl transformers``): each named
with its reason, ``test_upstream_validation_refusals.py`` covers every reason; multi-layer
EAGLE, the overlap schedule, the
``SGLANG_ENABLE_PP_SPEC`` conditions, NGRAM, ``--min-free-slots-delay``).  DFLASH with PP
stays refused on every path: these releases refuse it in ``speculative_hook._handle_dflash``
(``cfg.pp_size != 1``), so the patch does not relax it.  On 0.5.23
``handle_aux_hidden_state_capture`` still refuses ``--enable-return-aux-hidden-states`` with
PP for every model, Llama and Mistral (which relay their captures) included, with the
reworded message (only the first pipeline rank returns output, and the PP output relay
carries no hidden states), and keeps its other refusals
(``test_upstream_validation_aux_flag.py`` covers each capture method).  The release's own
validation refuses EAGLE3/DFLASH with PP.  0.5.18-0.5.20 refuse every speculative algorithm with PP on GPU and their validation
is not patched.
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.generate import generate
from codemods.upstream.validation.refusals import NOT_RELAYED, TRANSFORMERS
from codemods.upstream.validation.relax import AUX_FLAG_MESSAGE, METHODS_TABLE, MODULE

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
ACCEPTED = {
    "eagle_pp_spec",
    "eagle_prefill",
    "eagle3_pp_spec",
    "eagle3_prefill",
    "eagle3_subclass_pp_spec",
    "eagle3_subclass_prefill",
}
#: Accepted for MistralForCausalLM, which only inherits the patched class's support.
SUBCLASS_ACCEPTED = {"eagle3_subclass_pp_spec", "eagle3_subclass_prefill"}
#: DFLASH with PP, refused on every path by the patched check as by the release's.
DFLASH_REFUSED = (
    "dflash_prefill",
    "dflash_other_model",
    "dflash_aggregate",
    "dflash_pp_spec",
    "dflash_pp_spec_prefill",
)
CANNOT = "cannot capture EAGLE3 aux hidden states with --pp-size 2:"
#: case -> the refusal that must remain (a part of its message).
STILL_REFUSED = {
    "eagle3_other_model": f"KimiLinearForCausalLM {CANNOT} {NOT_RELAYED}",
    "dflash_prefill": "only supports EAGLE",
    "dflash_other_model": "only supports EAGLE",
    "eagle3_aggregate_without_pp_spec": "only supported on prefill nodes",
    "eagle3_multi_layer": "only supports EAGLE",
    "eagle3_pp_spec_adaptive": "--speculative-adaptive",
    "eagle3_pp_spec_prefill": "SGLANG_ENABLE_PP_SPEC is not compatible with --disaggregation",
    "eagle3_overlap": "overlap schedule",
    "dflash_aggregate": "only supports EAGLE",
    "dflash_pp_spec": "only supports EAGLE",
    "dflash_pp_spec_prefill": "only supports EAGLE",
    "ngram": "only supports EAGLE",
    # A subclass with its own stack (Llama4ForCausalLM), and the Transformers backend.
    "eagle3_own_stack_subclass": f"Llama4ForCausalLM {CANNOT} {NOT_RELAYED}",
    "eagle3_transformers_impl": f"TransformersForCausalLM {CANNOT} {TRANSFORMERS}",
    "min_free_slots_delay": "--min-free-slots-delay",
}
#: Refused with PP although the served class relays the method (0.5.23).
AUX_RELAYING = {"aux_eagle3", "aux_dflash", "aux_dspark_via_dflash", "aux_eagle3_subclass"}
AUX_STILL_REFUSED = {
    **dict.fromkeys(AUX_RELAYING, AUX_FLAG_MESSAGE),
    "aux_eagle3_other_model": AUX_FLAG_MESSAGE,
    "aux_dspark_via_dflash": AUX_FLAG_MESSAGE,
    "aux_dflash_without_ids": "requires --return-aux-hidden-state-layer-ids",
    "aux_with_draft": "drop --speculative-draft-model-path",
    "aux_ngram": "to name the capture convention",
    "aux_eagle3_own_stack_subclass": AUX_FLAG_MESSAGE,
    "aux_eagle3_transformers_impl": AUX_FLAG_MESSAGE,
}


def _validate(root) -> dict[str, str]:
    proc = run_python(["-m", "sglang_support.validation_check"], root, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module", params=RELEASES)
def release(request):
    return request.param, sglang_tree(request.param)


@pytest.fixture(scope="module")
def patched(release, tmp_path_factory):
    """(version, generate's result, outcomes of the patched copy's validation)."""
    version, root = release
    result, copy = patched_copy(root, tmp_path_factory.mktemp("patched"), models=["llama"])
    return version, result, _validate(copy)


def test_patched_validation_accepts_eagle3_and_keeps_refusing_dflash_with_pp(patched):
    version, result, outcomes = patched
    path = result.tree.module_path(MODULE)
    assert result.changed[-1] == path, "the validation change comes last"
    # llama's DFLASH hook is rewritten, but the release refuses DFLASH with PP elsewhere.
    assert "DFLASH" in result.validation.architectures["LlamaForCausalLM"]
    refusal = result.validation.dflash_refused
    assert refusal is not None and (refusal.function, refusal.condition) == (
        "_handle_dflash",
        "cfg.pp_size != 1",
    ), (version, refusal)
    for case in ACCEPTED:
        assert outcomes[case] == "accepted", (version, case, outcomes[case])
    for case, message in STILL_REFUSED.items():
        assert outcomes[case].startswith("refused:") and message in outcomes[case], (
            version,
            case,
            outcomes[case],
        )
    for case in DFLASH_REFUSED:
        assert "DFLASH" not in outcomes[case], (version, case, outcomes[case])
    if version >= "0.5.23":
        for case, message in AUX_STILL_REFUSED.items():
            assert outcomes[case].startswith("refused:") and message in outcomes[case], (
                version,
                case,
                outcomes[case],
            )
    else:
        assert not AUX_RELAYING & set(outcomes)


def test_a_subclass_in_an_untouched_file_is_accepted_by_its_stack(patched):
    """The hook's table names MistralForCausalLM, from a file the patch leaves alone: it
    keeps the patched LlamaForCausalLM's constructor and hooks, so its hooks set up the
    patched LlamaModel, and it is answered without model code like Llama; a model whose
    file the patch leaves alone and whose stack is its own keeps its refusal."""
    version, result, outcomes = patched
    for case in SUBCLASS_ACCEPTED:
        assert outcomes[case] == "accepted", (version, case, outcomes[case])
    assert outcomes["eagle3_other_model"].startswith("refused:"), version
    change = next(c for c in result.changes if c.path == result.tree.module_path(MODULE))
    table = change.new.split(f"{METHODS_TABLE} = {{\n", 1)[1].split("}", 1)[0]
    assert '    "LlamaForCausalLM": ("DFLASH", "DSPARK", "EAGLE3"),\n' in table
    assert '    "MistralForCausalLM": ("DFLASH", "DSPARK", "EAGLE3"),\n' in table
    architectures = result.validation.architectures
    assert architectures["MistralForCausalLM"] == architectures["LlamaForCausalLM"]
    assert not any(c.path.endswith("/models/mistral.py") for c in result.changes)
    llama = next(c for c in result.changes if c.path.endswith("/models/llama.py"))
    declared = (
        'class LlamaForCausalLM(nn.Module):\n    pp_aux_relay_methods = ("EAGLE3", "DFLASH")\n\n'
    )
    assert declared in llama.new


def test_release_validation_refuses_eagle3_and_dflash_with_pp(release):
    version, root = release
    outcomes = _validate(root)
    assert outcomes["eagle_prefill"] == "accepted"
    assert outcomes["eagle_pp_spec"] == "accepted"
    for case in (ACCEPTED - {"eagle_prefill", "eagle_pp_spec"}) | set(DFLASH_REFUSED):
        assert outcomes[case].startswith("refused:"), (version, case, outcomes[case])
    if version >= "0.5.23":
        for case in AUX_RELAYING:
            assert "only supports pp_size == 1" in outcomes[case], (version, outcomes[case])
            assert AUX_FLAG_MESSAGE not in outcomes[case], (version, outcomes[case])


@pytest.mark.parametrize("version", ("0.5.18", "0.5.20"))
def test_releases_without_a_pp_eagle_path_keep_their_validation(version):
    result = generate(sglang_tree(version), models=["llama"])
    assert result.tree.module_path(MODULE) not in result.changed
    assert any("validation left as is" in note for note in result.notes)
