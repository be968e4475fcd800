"""The rewrite of the forwards that hand off with ``residual_batch.to_pp`` and capture at
layer entry (the callback and gathered-collector shapes of
:mod:`~codemods.upstream.family.shapes.entry`, the snapshot shape of
:mod:`~codemods.upstream.family.shapes.snapshot`).

Before: the non-last-rank branch returns ``residual_batch.to_pp(hidden_states,
forward_batch)`` and the last stage reads ``aux_hidden_states`` as its layers left it (the
forward shown in :mod:`~codemods.upstream.family.shapes.entry`); after (every return of the non-last-rank branch hands this stage's captures on with
``to_pp``'s tensors, :mod:`~codemods.upstream.family.layer_entry.handoff`; the last stage
gathers them all right before it first reads the captures)::

        if not self.pp_group.is_last_rank:
            return pp_aux_handoff(
                self,
                residual_batch.to_pp(hidden_states, forward_batch),
                aux_hidden_states,
                pp_proxy_tensors,
            )
        hidden_states = residual_batch.final_norm(
            hidden_states, forward_batch, self.norm
        )

        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)
        if len(aux_hidden_states) == 0:
            return hidden_states

A last stage that also captures its own output gathers with ``final=True``, so that
capture stays last.  A forward that packs its captures into an ``AuxHiddenStatePacker``
gathers nothing after its layers: the last stage seeds the packer with the earlier stages'
captures right after making it (:mod:`~codemods.upstream.family.layer_entry.seed`).
"""

from __future__ import annotations

import libcst as cst

from codemods.upstream.edit.names import COLLECT
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.family.forward import (
    FamilyRewriteError,
    ForwardShape,
    handoff_parts,
    in_else_block,
)
from codemods.upstream.family.layer_entry.handoff import handoff_index, wrap_handoff_returns
from codemods.upstream.family.layer_entry.seed import insert_seed

#: Indentation of a method body and of a block directly inside it (black, 4 spaces).
METHOD_INDENT = 8
BLOCK_INDENT = 12


def rewrite_forward(fn: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    """Hand this stage's captures on with ``to_pp``'s tensors; gather them all on the
    last stage, right before the captures are first read."""
    body, aux_name, proxy_param = handoff_parts(fn, shape)
    index = handoff_index(body)
    if index is None:
        raise FamilyRewriteError(f"{shape.class_name}.forward has no PP handoff")
    found = body[index]
    assert isinstance(found, cst.If)
    handoff = wrap_handoff_returns(found, BLOCK_INDENT, aux_name, proxy_param)
    if shape.seed_after is not None:
        # A packer: the last stage takes the earlier stages' captures first.
        body[index] = handoff
        insert_seed(body, shape)
        return fn.with_changes(body=fn.body.with_changes(body=body))
    extra = ("final=True",) if shape.final_capture else ()
    collect = Call(COLLECT, ("self", aux_name, proxy_param, *extra))
    if shape.collect_in_else is not None:
        at = shape.collect_in_else
        body[index] = in_else_block(
            handoff,
            shape,
            lambda block: _insert_collect(block, at, BLOCK_INDENT, aux_name, collect),
        )
    else:
        body[index] = handoff
        if shape.collect_before is None or shape.collect_before >= len(body):
            raise FamilyRewriteError(f"{shape.class_name}.forward never reads the captures")
        _insert_collect(body, shape.collect_before, METHOD_INDENT, aux_name, collect)
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _insert_collect(block: list, position: int, indent: int, aux_name: str, collect: Call) -> None:
    """``aux = pp_aux_collect(...)`` before ``block[position]``; it takes over the blank
    lines before that statement, whose comments stay with it."""
    pad = " " * indent
    (statement,) = parse_statements(lines_to_text(render_call(pad, f"{aux_name} = ", collect)), pad)
    following = block[position]
    lines = list(following.leading_lines)
    split = 0
    while split < len(lines) and lines[split].comment is None:
        split += 1
    block.insert(position, statement.with_changes(leading_lines=lines[:split]))
    block[position + 1] = following.with_changes(leading_lines=lines[split:])
