"""Synthetic checks of the two reasons the family plan gives for models it leaves alone
although they run under PP: a capture hook that raises under PP itself
(``family_setter.pp_raise_of``) and a layer-entry stack that captures on the last rank
only (``family_entry_gated``).  Near misses keep the generic reasons."""

from __future__ import annotations

import textwrap

import libcst as cst

from codemods.upstream.family_entry_gated import gated_entry_problem
from codemods.upstream.family_setter import pp_raise_of


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
    for test in ("self.model.pp_group.world_size != 1", "get_pp_group().world_size > 1",
                 "self.pp_size != 1"):
        assert pp_raise_of(_function(HOOK.format(test=test))) == (
            f'if {test}: raise ValueError("needs one stage")'
        )


def test_other_raises_are_not_a_refusal_of_pp():
    for test in ("self.model.pp_group.world_size == 1", "layer_ids is None",
                 "self.pp_size != 2"):
        assert pp_raise_of(_function(HOOK.format(test=test))) is None
    # A raise after the ids are stored does not keep the hook from storing them.
    late = HOOK.format(test="self.pp_size != 1").replace(
        "    self.model.layers_to_capture = layer_ids\n", ""
    ).replace('    """Doc."""\n', '    """Doc."""\n    self.model.layers_to_capture = layer_ids\n')
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


def test_last_rank_gate_is_named_with_what_the_loop_skips():
    problem = gated_entry_problem(_function(STACK.format(gate="self.pp_group.is_last_rank")))
    assert problem == (
        "creates its capture list only under `capture_aux`, which requires "
        "`self.pp_group.is_last_rank`; never at its stage's first layer "
        "(`i > self.start_layer`); skips empty batches in its capture function: under PP "
        "the last stage captures only its own layers and the ids of earlier stages are "
        "lost without an error; this last-rank-gated layer-entry shape is not rewritten "
        "yet"
    )


def test_gate_without_the_last_rank_or_a_literal_handoff_is_not_this_shape():
    assert gated_entry_problem(_function(STACK.format(gate="self.enabled"))) is None
    literal = STACK.format(gate="self.pp_group.is_last_rank").replace(
        "residual_batch.to_pp(hidden_states, forward_batch)",
        'PPProxyTensors({"hidden_states": hidden_states})',
    )
    assert gated_entry_problem(_function(literal)) is None
