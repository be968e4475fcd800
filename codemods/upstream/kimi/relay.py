"""The relay code both Kimi rewrites (``linear.py``, ``k3.py``) put into a decoder
stack's forward: record each capture by layer id, hand the stage's captures on with the
``PPProxyTensors`` of non-last ranks (``self.pp_aux_relay.outgoing``, the ``PPAuxRelay``
``set_pp_aux_capture`` gave the stack), and gather the full list on the last stage
(``self.pp_aux_relay.collect``).  :func:`relay_forward` is the whole forward rewrite."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from codemods.upstream.edit.names import RELAY_ATTR
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.kimi import syntax


def relay_code(
    transport: str,
    captures: str,
    incoming: str,
    proxy_dict: str,
    proxy: str,
    loop_var: str,
    aux_name: str,
    handoff_entries,
    hidden: str | None,
):
    """A rewritten forward's relay: init lines (text), capture record, non-last-rank
    branch body, last-stage collect."""
    d2, d3, d4 = "    " * 2, "    " * 3, "    " * 4
    incoming_expr = f"None if {proxy} is None else {proxy}.tensors"
    init_lines = [f"{d2}{captures} = {{}}"]
    if len(d2) + len(f"{incoming} = {incoming_expr}") <= 88:
        init_lines.append(f"{d2}{incoming} = {incoming_expr}")
    else:
        init_lines += [f"{d2}{incoming} = (", f"{d3}{incoming_expr}", f"{d2})"]

    capture_line = parse_statements(f"{d4}{captures}[{loop_var}] = {aux_name}[-1]\n", d4)

    boundary_lines = [f"{d3}{proxy_dict} = {{"]
    boundary_lines += [f"{d4}{key}: {value}," for key, value in handoff_entries]
    boundary_lines += [f"{d3}}}", f"{d3}if {transport} is not None:"]
    boundary_lines += render_call(
        d4, "", Call(f"{proxy_dict}.update", (Call(f"{transport}.outgoing", (captures, incoming)),))
    )
    boundary_lines += [f"{d3}return PPProxyTensors({proxy_dict})"]
    boundary_nodes = parse_statements(lines_to_text(boundary_lines), d3)

    collect_lines = [f"{d2}if {transport} is not None:"]
    collect_lines += render_call(
        d3, f"{aux_name} = ", Call(f"{transport}.collect", (captures, incoming))
    )
    collect_node = parse_statements(lines_to_text(collect_lines), d2)[0]
    collect_node = collect_node.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    return init_lines, capture_line, boundary_nodes, collect_node


def insert_relay(
    func: cst.FunctionDef,
    new_func: cst.FunctionDef | cst.RemovalSentinel | cst.FlattenSentinel[cst.FunctionDef],
    shape,
    init_nodes: list,
    collect_node: cst.If,
) -> cst.FunctionDef:
    """``new_func`` with the relay's init after the aux list's creation and its collect
    after the non-last-rank branch (statements matched to ``func``'s, one to one)."""
    assert isinstance(new_func, cst.FunctionDef)
    assert isinstance(func.body, cst.IndentedBlock)
    assert isinstance(new_func.body, cst.IndentedBlock)
    body: list[cst.BaseStatement] = []
    originals = list(func.body.body)
    for index, (original, stmt) in enumerate(zip(originals, new_func.body.body, strict=True)):
        body.append(stmt)
        if original is shape.aux_init:
            body.extend(init_nodes)
        if original is shape.boundary:
            # Separate the new block the way the file separates the next statement.
            following = originals[index + 1] if index + 1 < len(originals) else None
            if isinstance(following, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and (
                not following.leading_lines
            ):
                collect_node = collect_node.with_changes(leading_lines=[])
            body.append(collect_node)
    return new_func.with_changes(body=new_func.body.with_changes(body=body))


def relay_forward(
    func: cst.FunctionDef,
    shape,
    handoff_entries,
    hidden: str | None,
    boundary_return: cst.SimpleStatementLine,
    more_init: Callable[[set[str], str], list[str]] | None = None,
) -> cst.FunctionDef:
    """``func`` (the stack's forward, ``shape`` its ``ForwardShape``) relaying its captures:
    the relay's init after the aux list's creation (then ``more_init(taken names, incoming
    name)``'s lines, if given), each capture recorded, the ``boundary_return`` ending the
    non-last-rank branch replaced by the handoff with the captures (the statements before
    it kept), the collect after that branch."""
    taken = syntax.function_locals(func)
    captures = syntax.fresh("dspark_captures", taken)
    incoming = syntax.fresh("dspark_incoming", taken)
    proxy_dict = syntax.fresh("proxy_tensors", taken)
    init_lines, capture_line, boundary_nodes, collect_node = relay_code(
        f"self.{RELAY_ATTR}",
        captures,
        incoming,
        proxy_dict,
        shape.proxy_param,
        shape.loop_var,
        shape.aux_name,
        handoff_entries,
        hidden,
    )
    if more_init is not None:
        init_lines += more_init(taken, incoming)
    init_nodes = parse_statements(lines_to_text(init_lines), "    " * 2)

    class _Forward(cst.CSTTransformer):
        def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
            if original is shape.capture_if:
                assert isinstance(updated.body, cst.IndentedBlock)
                return updated.with_changes(
                    body=updated.body.with_changes(body=[*updated.body.body, *capture_line])
                )
            if original is shape.boundary:
                assert isinstance(updated.body, cst.IndentedBlock)
                *kept, _ = updated.body.body
                first = boundary_nodes[0].with_changes(leading_lines=boundary_return.leading_lines)
                return updated.with_changes(
                    body=updated.body.with_changes(body=[*kept, first, *boundary_nodes[1:]])
                )
            return updated

    return insert_relay(func, func.visit(_Forward()), shape, init_nodes, collect_node)
