"""Synthetic checks of a capture hook that raises under PP itself, the reason the family
plan gives for leaving such a model alone (``family_setter.pp_raise_of``), and of the
layer-entry stack that captures on the last rank only (``family_entry_gated``): what is
recognised, why a near miss is not rewritten, and the rewrite."""

from __future__ import annotations

import textwrap

import libcst as cst

from codemods.upstream.family import registry
from codemods.upstream.family.setter import pp_raise_of

GATED = next(shape for shape in registry.SHAPES if shape.name == "gated")


def _function(source: str) -> cst.FunctionDef:
    (fn,) = cst.parse_module(textwrap.dedent(source)).body
    return fn


HOOK = """
def set_dflash_layers_to_capture(self, layer_ids):
    \"\"\"Doc.\"\"\"
    if {test}:
        raise ValueError("needs one stage")
    self.model.layers_to_capture = layer_ids
"""


def test_hook_that_raises_with_more_than_one_stage_is_named():
    for test in (
        "self.model.pp_group.world_size != 1",
        "get_pp_group().world_size > 1",
        "self.pp_size != 1",
    ):
        assert pp_raise_of(_function(HOOK.format(test=test))) == (
            f'if {test}: raise ValueError("needs one stage")'
        )


def test_other_raises_are_not_a_refusal_of_pp():
    for test in ("self.model.pp_group.world_size == 1", "layer_ids is None", "self.pp_size != 2"):
        assert pp_raise_of(_function(HOOK.format(test=test))) is None
    # A raise after the ids are stored does not keep the hook from storing them.
    late = (
        HOOK.format(test="self.pp_size != 1")
        .replace("    self.model.layers_to_capture = layer_ids\n", "")
        .replace(
            '    """Doc."""\n', '    """Doc."""\n    self.model.layers_to_capture = layer_ids\n'
        )
    )
    assert pp_raise_of(_function(late)) is None


STACK = """
def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):
    hidden_states = self.embed(input_ids)
    capture_aux = self.capture_aux_hidden_states and {gate}
    if capture_aux:
        aux = AuxHiddenStateList()

        def capture_output(value, *, owned=False):
            if value.shape[0] != 0:
                aux.capture(value, owned=owned)

    for i in range(self.start_layer, self.end_layer):
        hidden_states = self.layers[i](
            hidden_states,
            capture_output=capture_output
            if capture_aux and i > self.start_layer and i - 1 in self.layers_to_capture
            else None,
        )
    if not self.pp_group.is_last_rank:
        return residual_batch.to_pp(hidden_states, forward_batch)
    return hidden_states, aux
"""


def test_last_rank_gate_is_recognised_and_names_what_the_rewrite_lacks():
    fn = _function(STACK.format(gate="self.pp_group.is_last_rank"))
    assert GATED.claims(fn)
    shape = GATED.analyse("Stack", fn, 1)
    assert shape.capture_kinds == ("entry-gated",)
    assert shape.problem == (
        "the last-rank branch does not start with "
        "`hidden_states = residual_batch.complete_output(...)`"
    )
    unskipped = STACK.format(gate="self.pp_group.is_last_rank").replace(
        "i > self.start_layer", "i >= self.start_layer"
    )
    assert GATED.analyse("Stack", _function(unskipped), 1).problem == (
        "no `capture_output if capture_aux and i > self.start_layer and "
        "(i - 1 in self.layers_to_capture) else None` in the layer call"
    )


def test_gated_forward_is_rewritten_to_capture_on_every_stage():
    source = STACK.format(gate="self.pp_group.is_last_rank").replace(
        "    return hidden_states, aux\n",
        "    else:\n"
        "        hidden_states = residual_batch.complete_output(hidden_states, forward_batch)\n"
        "        return hidden_states, aux\n",
    )
    fn = _function(source)
    shape = GATED.analyse("Stack", fn, 1)
    assert shape.recognised, shape.problem
    rewritten = GATED.rewrite(fn, shape).nodes[0]
    text = cst.Module(body=[rewritten]).code
    assert "capture_aux = self.capture_aux_hidden_states\n" in text
    assert "if capture_aux and i > 0 and i - 1 in self.layers_to_capture" in text
    assert (
        "        handoff = residual_batch.to_pp(hidden_states, forward_batch)\n"
        '        if capture_aux and handoff["hidden_states"].shape[0] != 0:\n'
        "            handoff = pp_aux_handoff(self, handoff, aux, pp_proxy_tensors)\n"
        "        return handoff\n"
    ) in text
    assert (
        "        if capture_aux and hidden_states.shape[0] != 0:\n"
        "            aux = pp_aux_collect(self, aux, pp_proxy_tensors)\n"
        "        return hidden_states, aux\n"
    ) in text


def test_gate_without_the_last_rank_or_a_literal_handoff_is_not_this_shape():
    assert not GATED.claims(_function(STACK.format(gate="self.enabled")))
    literal = STACK.format(gate="self.pp_group.is_last_rank").replace(
        "residual_batch.to_pp(hidden_states, forward_batch)",
        'PPProxyTensors({"hidden_states": hidden_states})',
    )
    assert not GATED.claims(_function(literal))
