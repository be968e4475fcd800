"""The relay code both Kimi rewrites (``linear.py``, ``k3.py``) put into a decoder
stack's forward: record each capture by layer id, hand the stage's captures on with the
``PPProxyTensors`` of non-last ranks (``self.pp_aux_relay.outgoing``, the ``PPAuxRelay``
``set_pp_aux_capture`` gave the stack), and gather the full list on the last stage
(``self.pp_aux_relay.collect``)."""

from __future__ import annotations

import libcst as cst

from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call


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
