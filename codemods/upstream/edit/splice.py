"""Write a rewritten module back by generating the code of what changed only.

:func:`module_code` gives ``updated.code`` for a rewrite of a tree :func:`parse_text` parsed:
the original text, with only the statements that changed generated and put in place.  It
walks down from the module into every compound statement (class, function, loop, branch)
whose header is unchanged and whose body changed, so a rewritten loop inside a ``forward``
costs the code of that loop's changed statements, not the code of the whole class.
LibCST keeps every node's text exactly, so both texts are the same; where a change cannot
be placed with certainty (its old text is not unique in what follows), the enclosing
statement is replaced whole, and at the top the module's code is generated.

Before::

    module = cst.parse_module(source)
    text = module.visit(transformer).code

After::

    module = parse_text(source)
    text = module_code(module, module.visit(transformer))
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Sequence
from typing import cast

import libcst as cst

from codemods.upstream.edit.parsing import known_text

#: What module text becomes: ``(old text, new text, how)`` with ``how`` one of "replace",
#: "after" (insert the new text after the old) and "before".
_Edit = tuple[str, str, str]
_Blocks = tuple[cst.IndentedBlock, ...]


@dataclasses.dataclass
class _Nested:
    """The edits inside one compound statement, and the edit replacing it whole (made only
    when those cannot be placed)."""

    inner: list[_Step]
    whole: Callable[[], _Edit]


_Step = _Edit | _Nested


class _Unsure(Exception):
    """A change could not be placed in the original text with certainty."""


def module_code(original: cst.Module, updated: cst.Module) -> str:
    """``updated.code``, where ``updated`` rewrites ``original`` (parsed by
    :func:`parse_text` in this ``parse_once`` block) and keeps the nodes it does not
    change: only changed statements are generated; the rest is the original text."""
    source = known_text(original)
    if source is None or not _same_fields(original, updated, "body"):
        return updated.code
    try:
        steps = _steps(original, updated, original.body, updated.body, (), ())
        pieces: list[str] = []
        cursor = _place(source, steps, 0, pieces)
    except _Unsure:
        return updated.code
    pieces.append(source[cursor:])
    return "".join(pieces)


def _steps(
    original: cst.Module,
    updated: cst.Module,
    old: Sequence[cst.CSTNode],
    new: Sequence[cst.CSTNode],
    old_blocks: _Blocks,
    new_blocks: _Blocks,
) -> list[_Step]:
    """The edits turning the statements ``old`` into ``new``, which stand in the blocks
    ``old_blocks`` / ``new_blocks`` (outermost first; none at module level)."""
    matcher = difflib.SequenceMatcher(
        a=[id(node) for node in old], b=[id(node) for node in new], autojunk=False
    )
    steps: list[_Step] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        pairs = list(zip(old[i1:i2], new[j1:j2], strict=False))
        if i2 - i1 == j2 - j1 and all(_same_header(a, b) for a, b in pairs):
            for a, b in pairs:
                steps.append(_nested(original, updated, a, b, old_blocks, new_blocks))
            continue
        added = "".join(_code(updated, node, new_blocks) for node in new[j1:j2])
        if i2 > i1:
            replaced = "".join(_code(original, node, old_blocks) for node in old[i1:i2])
            steps.append((replaced, added, "replace"))
        elif i1 < len(old) and (i1 == 0 or not isinstance(old[i1 - 1], cst.SimpleStatementLine)):
            # Right before the next statement is the same place as right after the previous
            # one; a simple statement's text is the cheaper to generate.
            steps.append((_code(original, old[i1], old_blocks), added, "before"))
        elif i1 > 0:
            steps.append((_code(original, old[i1 - 1], old_blocks), added, "after"))
        else:
            raise _Unsure
    return steps


def _nested(
    original: cst.Module,
    updated: cst.Module,
    old: cst.CSTNode,
    new: cst.CSTNode,
    old_blocks: _Blocks,
    new_blocks: _Blocks,
) -> _Step:
    """The edits inside the compound statement ``old`` that became ``new`` (same header)."""

    def whole() -> _Edit:
        return (_code(original, old, old_blocks), _code(updated, new, new_blocks), "replace")

    old_body, new_body = _body(old), _body(new)
    try:
        inner = _steps(
            original,
            updated,
            old_body.body,
            new_body.body,
            (*old_blocks, old_body),
            (*new_blocks, new_body),
        )
    except _Unsure:
        return whole()
    return _Nested(inner, whole)


def _body(node: cst.CSTNode) -> cst.IndentedBlock:
    body = getattr(node, "body", None)
    assert isinstance(body, cst.IndentedBlock)
    return body


def _same_header(old: cst.CSTNode, new: cst.CSTNode) -> bool:
    """The same compound statement with (possibly) other statements in its indented body:
    every other field, and every other field of the body, unchanged."""
    return (
        type(old) is type(new)
        and isinstance(old, cst.BaseCompoundStatement)
        and isinstance(getattr(old, "body", None), cst.IndentedBlock)
        and isinstance(getattr(new, "body", None), cst.IndentedBlock)
        and _same_fields(old, new, "body")
        and _same_fields(_body(old), _body(new), "body")
    )


def _same_fields(old: cst.CSTNode, new: cst.CSTNode, but: str) -> bool:
    """Every field of ``old`` and ``new`` but ``but`` holds the same nodes (or equal values)."""
    for field in dataclasses.fields(old):
        if field.name == but:
            continue
        a, b = getattr(old, field.name), getattr(new, field.name)
        if a is b:
            continue
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            if len(a) != len(b) or any(x is not y for x, y in zip(a, b, strict=True)):
                return False
        elif isinstance(a, cst.CSTNode) or isinstance(b, cst.CSTNode) or a != b:
            return False
    return True


def _code(module: cst.Module, node: cst.CSTNode, blocks: _Blocks) -> str:
    """The text of a statement where it stands: at module level, or inside ``blocks``
    (outermost first), indented as there."""
    if not blocks:
        return module.code_for_node(node)
    head, indent = "", ""
    inner = cast(cst.SimpleStatementLine | cst.BaseCompoundStatement, node)
    for block in blocks:
        head += f"{indent}class _:{module.default_newline}"
        indent += module.default_indent if block.indent is None else block.indent
    for block in reversed(blocks):
        body = block.with_changes(body=[inner], header=cst.TrailingWhitespace(), footer=())
        inner = cst.ClassDef(name=cst.Name("_"), body=body)
    wrapper = cst.Module(
        body=[inner],
        header=(),
        footer=(),
        default_indent=module.default_indent,
        default_newline=module.default_newline,
    )
    text = wrapper.code
    if not text.startswith(head):
        raise _Unsure
    return text[len(head) :]


def _place(source: str, steps: list[_Step], cursor: int, pieces: list[str]) -> int:
    """Put the steps in order into ``pieces``, from ``cursor`` on (the new cursor).  An edit's
    old text must occur exactly once after the previous edit; a compound statement whose
    inner edits cannot be placed is replaced whole."""
    for step in steps:
        if isinstance(step, _Nested):
            mark = len(pieces)
            try:
                cursor = _place(source, step.inner, cursor, pieces)
            except _Unsure:
                del pieces[mark:]
                cursor = _place(source, [step.whole()], cursor, pieces)
            continue
        found, new, how = step
        start = source.find(found, cursor)
        if start < 0 or not found or source.find(found, start + 1) >= 0:
            raise _Unsure
        kept = {"replace": "", "after": found, "before": ""}[how]
        pieces += [source[cursor:start], kept, new, found if how == "before" else ""]
        cursor = start + len(found)
    return cursor
