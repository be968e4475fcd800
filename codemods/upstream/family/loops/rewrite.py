"""The rewrite of the classic layer-loop forward (``shapes/loop.py``, which recognises it).

Non-last stages add their captures to the ``PPProxyTensors`` they hand on; the last stage
gathers every stage's captures before it first reads them, before::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states, "residual": residual})
        ...
        if len(aux_hidden_states) == 0:

after::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **pp_aux_outgoing(self, aux_hidden_states, pp_proxy_tensors),
                }
            )
        ...
        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)
        if len(aux_hidden_states) == 0:

A handoff of a named dict gets ``<name>.update(pp_aux_outgoing(...))`` before its return;
a forward that captures under a condition hands on and gathers under it
(``aux_outgoing``); a forward that packs its captures is seeded instead of gathered
(:mod:`~codemods.upstream.family.layer_entry.seed`).
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from codemods.upstream.edit.names import COLLECT, OUTGOING
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.family.forward import (
    FamilyRewriteError,
    ForwardShape,
    handoff_parts,
    in_else_block,
)
from codemods.upstream.family.gate import every_stage
from codemods.upstream.family.layer_entry.seed import insert_seed
from codemods.upstream.family.syntax import (
    OUTGOING_LOCAL,
    code_of,
    non_last_return_index,
    proxy_call_of,
)

#: Indentation of a method body and of a block directly inside it (black, 4 spaces).
METHOD_INDENT = 8
BLOCK_INDENT = 12


def rewrite_loop_forward(
    fn: cst.FunctionDef, shape: ForwardShape, boundaries: bool = False
) -> cst.FunctionDef:
    """Add this stage's captures to the handoff; gather all of them on the last stage.
    ``boundaries``: the forward captures at layer boundaries (the glue is told so)."""
    body, aux_name, proxy_param = handoff_parts(fn, shape)
    index = non_last_return_index(body)
    if index is None:
        raise FamilyRewriteError(f"{shape.class_name}.forward has no PP handoff")
    for position in shape.gate_assignments:
        body[position] = every_stage(body[position])
    extra = ("boundaries=True",) if boundaries else ()
    outgoing = Call(OUTGOING, ("self", aux_name, proxy_param, *extra))
    handoff = body[index]
    # non_last_return_index: an ``if`` block that ends in a ``return`` line
    assert isinstance(handoff, cst.If) and isinstance(handoff.body, cst.IndentedBlock)
    handoff_body = list(handoff.body.body)
    return_line = handoff_body[-1]
    assert isinstance(return_line, cst.SimpleStatementLine)
    returned = proxy_call_of(handoff)
    argument = returned.args[0].value
    block_pad = " " * BLOCK_INDENT
    if shape.gate is not None:
        if isinstance(argument, cst.Dict):
            lines = [f"{block_pad}{OUTGOING_LOCAL} = {{}}", f"{block_pad}if {shape.gate}:"]
            lines += render_call(block_pad + "    ", f"{OUTGOING_LOCAL} = ", outgoing)
            added = parse_statements(lines_to_text(lines), block_pad)
            entry = [f"{block_pad}{' ' * 8}**{OUTGOING_LOCAL},"]
            replaced = parse_statements(_proxy_return_text(argument, entry), block_pad)[0]
        else:
            update = Call(f"{code_of(argument)}.update", (outgoing,))
            lines = [f"{block_pad}if {shape.gate}:"]
            lines += render_call(block_pad + "    ", "", update)
            added = parse_statements(lines_to_text(lines), block_pad)
            replaced = handoff_body[-1]
        # The new statements take the blank lines before the return; comments stay
        # with the return they describe.
        blank, comments = _split_leading(return_line.leading_lines)
        added[0] = added[0].with_changes(leading_lines=blank)
        handoff_body[-1:] = [*added, replaced.with_changes(leading_lines=comments)]
    elif isinstance(argument, cst.Dict):
        entry = render_call(block_pad + " " * 8, "**", outgoing, ",")
        replaced = parse_statements(_proxy_return_text(argument, entry), block_pad)[0]
        handoff_body[-1] = replaced.with_changes(leading_lines=return_line.leading_lines)
    else:
        update = Call(f"{code_of(argument)}.update", (outgoing,))
        update_text = lines_to_text(render_call(block_pad, "", update))
        (statement,) = parse_statements(update_text, block_pad)
        # The new statement takes the blank lines / comments that preceded the return.
        handoff_body.insert(
            len(handoff_body) - 1,
            statement.with_changes(leading_lines=return_line.leading_lines),
        )
        handoff_body[-1] = handoff_body[-1].with_changes(leading_lines=[])
    handoff = handoff.with_changes(body=handoff.body.with_changes(body=handoff_body))
    if shape.seed_after is not None:
        # A packer: the last stage takes the earlier stages' captures first.
        body[index] = handoff
        insert_seed(body, shape)
        return fn.with_changes(body=fn.body.with_changes(body=body))
    collect = Call(COLLECT, ("self", aux_name, proxy_param, *extra))
    if shape.collect_in_else is not None:
        at = shape.collect_in_else
        body[index] = in_else_block(
            handoff, shape, lambda block: _insert_collect(block, at, BLOCK_INDENT, shape, collect)
        )
        return fn.with_changes(body=fn.body.with_changes(body=body))
    body[index] = handoff

    position = shape.collect_before if shape.collect_before is not None else index + 1
    if position >= len(body):
        raise FamilyRewriteError(f"{shape.class_name}.forward ends at the PP handoff")
    _insert_collect(body, position, METHOD_INDENT, shape, collect)
    return fn.with_changes(body=fn.body.with_changes(body=body))


def _insert_collect(
    block: list, position: int, indent: int, shape: ForwardShape, collect: Call
) -> None:
    """Insert ``aux = pp_aux_collect(...)`` (under the gate, if any) before
    ``block[position]``, taking over its blank lines."""
    pad = " " * indent
    target = f"{shape.aux_name} = "
    following = block[position]
    if shape.gate is not None and _tests_exactly(following, shape.gate):
        # ``if <gate>: ... return ..., aux``: gather first thing inside that block.
        inner = list(following.body.body)
        _insert_collect(inner, 0, indent + 4, replace(shape, gate=None), collect)
        block[position] = following.with_changes(body=following.body.with_changes(body=inner))
        return
    if shape.gate is None:
        lines = render_call(pad, target, collect)
    else:
        lines = [f"{pad}if {shape.gate}:", *render_call(pad + "    ", target, collect)]
    (statement,) = parse_statements(lines_to_text(lines), pad)
    blank, comments = _split_leading(following.leading_lines)
    block.insert(position, statement.with_changes(leading_lines=blank))
    block[position + 1] = following.with_changes(leading_lines=comments)


def _tests_exactly(statement: cst.CSTNode, condition: str) -> bool:
    return (
        isinstance(statement, cst.If)
        and isinstance(statement.body, cst.IndentedBlock)
        and " ".join(code_of(statement.test).split()) == condition
    )


def _proxy_return_text(argument: cst.Dict, entry: list[str]) -> str:
    """``return PPProxyTensors({...})`` with the outgoing-captures ``entry`` lines spliced
    in, laid out as black lays out a dict that no longer fits on one line (one entry per
    line)."""
    pad = " " * BLOCK_INDENT
    entry_pad = pad + " " * 8
    lines = [f"{pad}return PPProxyTensors(", f"{pad}    {{"]
    for element in argument.elements:
        assert isinstance(element, cst.DictElement)  # analyse_forward rejects others
        lines.append(f"{entry_pad}{code_of(element.key)}: {code_of(element.value)},")
    lines += entry
    lines += [f"{pad}    }}", f"{pad})"]
    return lines_to_text(lines)


def _split_leading(lines) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    lines = list(lines)
    split = 0
    while split < len(lines) and lines[split].comment is None:
        split += 1
    return lines[:split], lines[split:]
