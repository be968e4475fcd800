"""Capture conditions that hold on every PP stage or on none, and the last-rank operand
the rewrites drop from them.

A forward may capture only under a condition besides ``i in ids``: ``<x>.shape[0] != 0``
(the token count is the same on every stage) or a name assigned once, before the layer
loop (:func:`gate_of`).  Such a name often also requires ``<pp>.is_last_rank``, before::

        capture_aux = (
            self.capture_aux_hidden_states
            and self.pp_group.is_last_rank
            and self.layers_to_capture is not None
        )

after (:func:`every_stage`: with the relay set up every stage captures its own layers)::

        capture_aux = (
            self.capture_aux_hidden_states and self.layers_to_capture is not None
        )

Comments above such an assignment that tie capture to the last stage become stale; they
are named for review (:func:`last_stage_comments`), and where a rewrite can say what holds
instead, the sentence is rewritten (:func:`refresh_last_stage_comments`)::

        # DSpark / DFlash capture relies on the per-layer eager loop exposing the
        # completed hidden state of each layer, so it is only supported when this
        # rank owns the final pipeline stage (the aux list is consumed there).

becomes::

        # DSpark / DFlash capture relies on the per-layer eager loop exposing the
        # completed hidden state of each layer; each pipeline stage captures the
        # layers it runs for the last one.
"""

from __future__ import annotations

import re
import textwrap

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.pyformat import LINE_LENGTH, lines_to_text, parse_statements
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import FamilyRewriteError
from codemods.upstream.family.syntax import LAST_RANK, code_of, conjuncts_of

#: Indentation of a method body (black, 4 spaces).
METHOD_INDENT = 8


#: ``hidden_states.shape[0] != 0`` / ``> 0``: the batch is not empty.  The token count
#: is the same on every PP stage, so such a condition holds on all stages or on none.
_NON_EMPTY = m.Comparison(
    left=m.Subscript(
        value=m.Attribute(value=m.Name(), attr=m.Name("shape")),
        slice=[m.SubscriptElement(m.Index(m.Integer("0")))],
    ),
    comparisons=[
        m.ComparisonTarget(operator=m.NotEqual() | m.GreaterThan(), comparator=m.Integer("0"))
    ],
)


def gate_of(body, loop: cst.For, conditions) -> tuple[tuple[str, ...], list[int]] | str:
    """The capture condition besides ``i in ids``, as source parts, and the indices of
    the top-level statements defining its names; or why it may differ between stages.

    Allowed: ``<x>.shape[0] != 0`` (the token count is the same on every stage) and
    names assigned once, at the top level, before the layer loop (``capture_aux =
    ...``); a ``<pp>.is_last_rank`` operand of such a name is dropped by the rewrite.
    """
    top = next(
        (k for k, statement in enumerate(body) if any(n is loop for n in _loops_in(statement))),
        None,
    )
    parts: list[str] = []
    assignments: list[int] = []
    for condition in conditions:
        text = " ".join(code_of(condition).split())
        if m.matches(condition, _NON_EMPTY):
            parts.append(text)
            continue
        if not isinstance(condition, cst.Name) or top is None:
            return f"captures under `{text}`, which may differ between PP stages"
        index = _single_assignment(body, condition.value)
        if index is None or index >= top:
            return f"capture condition `{text}` is not assigned once before the layer loop"
        parts.append(text)
        assignments.append(index)
    return tuple(parts), assignments


def _loops_in(statement: cst.CSTNode) -> list[cst.CSTNode]:
    return [statement, *findall(statement, m.For())]


_LAST_STAGE_WORDS = re.compile(
    r"\b(last|final)\s+(pipeline\s+|PP\s+)?(stage|rank)\b|is_last_rank", re.IGNORECASE
)


def last_stage_comments(body, indices: list[int]) -> tuple[str, ...]:
    """First lines of the comment blocks right above the gate assignments (or the
    statement before one) that speak of the last PP stage."""
    found = []
    for index in indices:
        for k in (index - 1, index):
            if k < 0:
                continue
            comments = [
                line.comment.value for line in body[k].leading_lines if line.comment is not None
            ]
            if comments and _LAST_STAGE_WORDS.search(" ".join(comments)):
                found.append(comments[0])
    return tuple(dict.fromkeys(found))


#: A clause that ties the capture to the last stage, and what holds under the relay.
_LAST_STAGE_CLAUSE = re.compile(
    r",\s+so it is only supported when this rank owns the final pipeline stage(\s+\([^)]*\))?\."
)
_RELAYED_CLAUSE = "; each pipeline stage captures the layers it runs for the last one."


def refresh_last_stage_comments(body: list, indices: list[int]) -> tuple[list, bool]:
    """``body`` with the comment blocks of :func:`last_stage_comments` rewritten where their
    clause on the last stage is one this module knows (only the comment lines that clause
    spans, re-wrapped as wide as the block), and whether every stale block was rewritten."""
    body = list(body)
    fixed = True
    for index in indices:
        for k in (index - 1, index):
            if k < 0:
                continue
            lines = list(body[k].leading_lines)
            rows = [n for n, line in enumerate(lines) if line.comment is not None]
            texts = [lines[n].comment.value.removeprefix("#").strip() for n in rows]
            if not rows or not _LAST_STAGE_WORDS.search(" ".join(texts)):
                continue
            replaced = _replace_clause(texts)
            if replaced is None:
                fixed = False
                continue
            first, last, new_texts = replaced
            width = max(len(text) for text in texts)
            wrapped = [
                cst.EmptyLine(comment=cst.Comment(f"# {line}"))
                for line in textwrap.wrap(" ".join(new_texts), width, break_on_hyphens=False)
            ]
            lines[rows[first] : rows[last] + 1] = wrapped
            body[k] = body[k].with_changes(leading_lines=lines)
    return body, fixed


def _replace_clause(texts: list[str]) -> tuple[int, int, list[str]] | None:
    """The first and last comment line the known clause spans, and their text with the
    clause restated; None when the block keeps a last-stage claim this cannot restate."""
    joined = " ".join(texts)
    match = _LAST_STAGE_CLAUSE.search(joined)
    if match is None:
        return None
    offsets, position = [], 0
    for text in texts:
        offsets.append(position)
        position += len(text) + 1
    first = max(n for n, offset in enumerate(offsets) if offset <= match.start())
    last = max(n for n, offset in enumerate(offsets) if offset < match.end())
    span = " ".join(texts[first : last + 1])
    new = _LAST_STAGE_CLAUSE.sub(_RELAYED_CLAUSE, span, count=1)
    rest = texts[:first] + [new] + texts[last + 1 :]
    if _LAST_STAGE_WORDS.search(" ".join(rest)):
        return None
    return first, last, [new]


def _single_assignment(body, name: str) -> int | None:
    """Index of the one top-level ``name = ...`` / ``name: T = ...`` of ``body``."""
    target = m.Name(name)
    pattern = m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(target)]) | m.AnnAssign(target=target)]
    )
    found = [k for k, statement in enumerate(body) if m.matches(statement, pattern)]
    every = sum(
        len(findall(statement, m.AssignTarget(target=target) | m.AnnAssign(target=target)))
        for statement in body
    )
    if len(found) != 1 or every != 1:
        return None
    return found[0]


def every_stage(statement: cst.BaseStatement) -> cst.BaseStatement:
    """``gate = a and <pp>.is_last_rank and b`` -> ``gate = a and b``: with the
    relay set up every stage captures its own layers."""
    if not isinstance(statement, cst.SimpleStatementLine):
        raise FamilyRewriteError("capture condition is not a top-level assignment")
    assign = statement.body[0]
    if not isinstance(assign, (cst.Assign, cst.AnnAssign)):
        raise FamilyRewriteError("capture condition is not a top-level assignment")
    value = assign.value
    if not isinstance(value, cst.BooleanOperation):
        return statement
    operands = conjuncts_of(value)
    operators = and_operators(value)
    kept = [k for k, operand in enumerate(operands) if not m.matches(operand, LAST_RANK)]
    if not kept:
        raise FamilyRewriteError("capture condition is only the last-rank test")
    if len(kept) == len(operands):
        return statement
    texts = [code_of(operands[k]) for k in kept]
    if any("\n" in text or "#" in text for text in texts):
        # Keep the layout: each kept operand keeps the operator in front of it.
        new_value: cst.BaseExpression = operands[kept[0]]
        for k in kept[1:]:
            new_value = cst.BooleanOperation(
                left=new_value, operator=operators[k - 1], right=operands[k]
            )
        if isinstance(new_value, cst.BooleanOperation):
            new_value = new_value.with_changes(lpar=value.lpar, rpar=value.rpar)
        return statement.with_changes(body=[assign.with_changes(value=new_value)])
    # Lay the shorter condition out as black does: one line, else the operands on one
    # line inside parentheses, else one operand per line.
    pad = " " * METHOD_INDENT
    head = code_of(statement.body[0]).split("=", 1)[0].rstrip() + " = "
    flat = " and ".join(texts)
    if len(pad + head + flat) <= LINE_LENGTH:
        lines = [pad + head + flat]
    elif len(pad + "    " + flat) <= LINE_LENGTH:
        lines = [pad + head + "(", pad + "    " + flat, pad + ")"]
    else:
        body = [texts[0]] + [f"and {text}" for text in texts[1:]]
        lines = [pad + head + "(", *(pad + "    " + text for text in body), pad + ")"]
    (rendered,) = parse_statements(lines_to_text(lines), pad)
    return rendered.with_changes(leading_lines=statement.leading_lines)


def and_operators(value: cst.BaseExpression) -> list[cst.And]:
    """The ``and`` operators of a chain, left to right (as :func:`conjuncts_of`)."""
    if isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.And):
        return and_operators(value.left) + [value.operator] + and_operators(value.right)
    return []
