"""Layer-entry forwards that pack their captures (deepseek_v2, mimo_v2; SGLang 0.5.21+).

A few decoder stacks collect the captures of the gathered collector in an
``AuxHiddenStatePacker`` instead of an ``AuxHiddenStateList``: one preallocated
``[tokens, K * hidden]`` buffer for the ``K`` capture ids, filled slot by slot, whose
``finalize()`` raises ("captured 1 of 3 aux hidden states") unless all ``K`` were taken.
Their handoff may also name the ``PPProxyTensors`` before returning it, to add entries of
its own (deepseek_v2's ``topk_indices``)::

        aux_hidden_states = AuxHiddenStatePacker(len(self.layers_to_capture))
        for i in range(normal_start_layer, normal_end_layer):
            ... layer(..., captured_last_layer_outputs=aux_hidden_states
                      if i in self.layers_to_capture else None, ...)

        if not self.pp_group.is_last_rank:
            proxy_tensors = residual_batch.to_pp(hidden_states, forward_batch)
            ...
            return proxy_tensors
        else:
            ...

        if len(aux_hidden_states) == 0:
            return hidden_states
        return hidden_states, aux_hidden_states.finalize()

and the last stage may capture its own output before the handoff (mimo_v2)::

        if (
            self.pp_group.is_last_rank
            and self.config.num_hidden_layers in self.layers_to_capture
        ):
            aux_hidden_states.append(...)

This module recognises those pieces for the layer-entry shape
(:mod:`~codemods.upstream.family.shapes.entry`); the rewrite is the family's: the returned
name is handed on through ``pp_aux_handoff``, and each stage writes the earlier stages'
captures into its packer right after making it (``aux = pp_aux_seed(...)``,
:mod:`~codemods.upstream.family.layer_entry.seed`), each once, into its final slot, before
its layers and its output capture fill the rest: a non-last stage's packer, sized for what
it hands on, is sent as it is, and the last stage's ``finalize()`` returns the tensor a
single-stage run returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.syntax import (
    LAST_RANK,
    SELF_IDS,
    name_value,
    only_assign,
    returned_value,
)

#: The collectors a layer-entry forward may create, once, at its top level.
LIST_CLASS = "AuxHiddenStateList"
PACKER_CLASS = "AuxHiddenStatePacker"
COLLECTOR_CLASSES = (LIST_CLASS, PACKER_CLASS)

#: ``AuxHiddenStatePacker(len(self.<ids>))``: one slot per capture id.
_PACKER_CALL = m.Call(
    func=m.Name(PACKER_CLASS),
    args=[m.Arg(m.Call(func=m.Name("len"), args=[m.Arg(SELF_IDS)]), keyword=None)],
)
_LIST_CALL = m.Call(func=m.Name(LIST_CLASS), args=[])
COLLECTOR_CALL = _LIST_CALL | _PACKER_CALL
#: Any call of a collector class, whatever its arguments.
ANY_COLLECTOR_CALL = m.Call(
    func=m.Name(value=m.MatchIfTrue(lambda name: name in COLLECTOR_CLASSES))
)


def is_collector_forward(fn: cst.FunctionDef) -> bool:
    """The forward creates an ``AuxHiddenStateList()`` or a packer sized by the ids, in a
    statement of its own block (a packer made under a capture condition belongs to the
    forwards that append in their layer loop)."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return bool(findall(fn, COLLECTOR_CALL))
    return any(collector_creation(statement) for statement in fn.body.body)


def collector_creation(statement: cst.CSTNode) -> tuple[str, int] | None:
    """``(name, capture-id reads)`` of ``name = AuxHiddenStateList()`` (0 reads) or
    ``name = AuxHiddenStatePacker(len(self.<ids>))`` (1 read); ``None`` otherwise."""
    if not m.matches(
        statement,
        m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=COLLECTOR_CALL)]
        ),
    ):
        return None
    assign = only_assign(statement)
    return name_value(assign.targets[0].target), len(findall(assign.value, SELF_IDS))


def returned_handoff(block: Sequence[cst.CSTNode], handoff_func: str) -> bool:
    """``block`` ends in ``return <name>`` where its first statement is
    ``<name> = <x>.<handoff_func>(...)`` and nothing else in it rebinds ``<name>``."""
    if len(block) < 2:
        return False
    last = block[-1]
    if not m.matches(last, m.SimpleStatementLine(body=[m.Return(value=m.Name())])):
        return False
    name = name_value(returned_value(last))
    built = m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name(name))],
                value=m.Call(func=m.Attribute(attr=m.Name(handoff_func))),
            )
        ]
    )
    if not m.matches(block[0], built):
        return False
    rebinds = m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name))
    return not any(findall(statement, rebinds) for statement in block[1:])


#: ``self.end_layer`` or ``self.config.num_hidden_layers``: the id of the stage output
#: on the last stage.
_OUTPUT_ID = m.Attribute(value=m.Name("self"), attr=m.Name("end_layer")) | m.Attribute(
    value=m.Attribute(value=m.Name("self"), attr=m.Name("config")),
    attr=m.Name("num_hidden_layers"),
)
_OUTPUT_TEST = m.Comparison(
    left=_OUTPUT_ID, comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)]
)


def last_rank_output_capture(statement: cst.CSTNode, aux_name: str) -> bool:
    """``if <pp>.is_last_rank and <output id> in self.<ids>: <aux>.append(...)`` (or
    ``.capture``), before the handoff: the last stage captures its output."""
    if not isinstance(statement, cst.If) or not m.matches(
        statement,
        m.If(
            test=m.BooleanOperation(left=LAST_RANK, operator=m.And(), right=_OUTPUT_TEST),
            orelse=None,
        ),
    ):
        return False
    block = statement.body.body
    fill = m.SimpleStatementLine(
        body=[
            m.Expr(
                m.Call(
                    func=m.Attribute(
                        value=m.Name(aux_name), attr=m.Name("append") | m.Name("capture")
                    )
                )
            )
        ]
    )
    return len(block) == 1 and m.matches(block[0], fill)


#: ``not self.<ids>`` / ``len(self.<ids>)``: reads that are the same on every stage.
SIZE_READ = m.UnaryOperation(operator=m.Not(), expression=SELF_IDS) | m.Call(
    func=m.Name("len"), args=[m.Arg(SELF_IDS)]
)
