"""Parse each source text once per run; write a rewritten module back by generating the code
of what changed only.

Inside ``with parse_once():`` (one ``generate`` run), :func:`parse_text` parses a given text
once: the capture-hook family and the Kimi-Linear and Kimi-K3 rewriters all read
``kimi_linear.py`` and ``kimi_k3.py``, for example, and share one tree (trees are immutable).
The block also pauses Python's cyclic garbage collector: the trees of a run (about a million
nodes for SGLang's model files) live until the run ends and hold no reference cycles, yet
every full collection would walk all of them again, which made parsing them in a run about
a third slower than parsing them one at a time.
:func:`module_code` gives ``updated.code`` for a rewrite of such a tree: the original text
with only the changed top-level statements, or the changed statements of a top-level
class, replaced (LibCST keeps every node's text exactly, so both are the same).

Before::

    module = cst.parse_module(source)
    text = module.visit(transformer).code

After::

    module = parse_text(source)
    text = module_code(module, module.visit(transformer))
"""

from __future__ import annotations

import difflib
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import libcst as cst

#: text -> tree, while a ``parse_once`` block runs.
_TREES: ContextVar[dict[str, cst.Module] | None] = ContextVar("_TREES", default=None)
#: id(tree) -> (tree, text) for the same trees.
_SOURCES: ContextVar[dict[int, tuple[cst.Module, str]] | None] = ContextVar(
    "_SOURCES", default=None
)


@contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, :func:`parse_text` parses each distinct text once, and the cyclic
    garbage collector is paused (as it was before the block once it ends)."""
    trees, sources = _TREES.set({}), _SOURCES.set({})
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
        _TREES.reset(trees)
        _SOURCES.reset(sources)


def parse_text(source: str) -> cst.Module:
    """``cst.parse_module(source)``, shared within a ``parse_once`` block (trees are
    immutable, so sharing is safe)."""
    trees, sources = _TREES.get(), _SOURCES.get()
    if trees is None or sources is None:
        return cst.parse_module(source)
    module = trees.get(source)
    if module is None:
        module = trees[source] = cst.parse_module(source)
        sources[id(module)] = (module, source)
    return module


def source_text(module: cst.Module) -> str:
    """``module.code``: the text :func:`parse_text` parsed it from, when known."""
    known = (_SOURCES.get() or {}).get(id(module))
    return known[1] if known is not None and known[0] is module else module.code


class _Unsure(Exception):
    """A change could not be placed in the original text with certainty."""


def module_code(original: cst.Module, updated: cst.Module) -> str:
    """``updated.code``, where ``updated`` rewrites ``original`` (parsed by
    :func:`parse_text` in this ``parse_once`` block) and keeps the nodes it does not
    change: only changed statements are generated; the rest is the original text."""
    known = (_SOURCES.get() or {}).get(id(original))
    if known is None or known[0] is not original or not _same_frame(original, updated):
        return updated.code
    source = known[1]
    edits: list[tuple[str, str, str]] = []  # (text in the source, new text, how)
    try:
        _collect(original, updated, original.body, updated.body, None, None, edits)
        return _apply(source, edits)
    except _Unsure:
        return updated.code


def _same_frame(original: cst.Module, updated: cst.Module) -> bool:
    return (
        _same(original.header, updated.header)
        and _same(original.footer, updated.footer)
        and original.default_indent == updated.default_indent
        and original.default_newline == updated.default_newline
        and original.encoding == updated.encoding
        and original.has_trailing_newline == updated.has_trailing_newline
    )


def _same(old, new) -> bool:
    return len(old) == len(new) and all(a is b for a, b in zip(old, new, strict=True))


def _collect(
    original: cst.Module,
    updated: cst.Module,
    old,
    new,
    old_block: cst.IndentedBlock | None,
    new_block: cst.IndentedBlock | None,
    edits: list[tuple[str, str, str]],
) -> None:
    """Edits turning the statements ``old`` into ``new`` (module level, or the body of a
    top-level class: ``old_block`` / ``new_block``)."""
    matcher = difflib.SequenceMatcher(
        a=[id(node) for node in old], b=[id(node) for node in new], autojunk=False
    )
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if (
            old_block is None
            and i2 - i1 == j2 - j1
            and all(_same_class(a, b) for a, b in zip(old[i1:i2], new[j1:j2], strict=True))
        ):
            for a, b in zip(old[i1:i2], new[j1:j2], strict=True):
                _collect(original, updated, a.body.body, b.body.body, a.body, b.body, edits)
            continue
        added = "".join(_code(updated, node, new_block) for node in new[j1:j2])
        if i2 > i1:
            replaced = "".join(_code(original, node, old_block) for node in old[i1:i2])
            edits.append((replaced, added, "replace"))
        elif i1 > 0:
            edits.append((_code(original, old[i1 - 1], old_block), added, "after"))
        elif i1 < len(old):
            edits.append((_code(original, old[i1], old_block), added, "before"))
        else:
            raise _Unsure


def _same_class(old: cst.CSTNode, new: cst.CSTNode) -> bool:
    """The same top-level class with (possibly) other statements in its body."""
    return (
        isinstance(old, cst.ClassDef)
        and isinstance(new, cst.ClassDef)
        and isinstance(old.body, cst.IndentedBlock)
        and isinstance(new.body, cst.IndentedBlock)
        and old.name is new.name
        and _same(old.bases, new.bases)
        and _same(old.keywords, new.keywords)
        and _same(old.decorators, new.decorators)
        and _same(old.leading_lines, new.leading_lines)
        and _same(old.lines_after_decorators, new.lines_after_decorators)
        and old.body.header is new.body.header
        and _same(old.body.footer, new.body.footer)
        and old.body.indent == new.body.indent
        and old.whitespace_before_colon is new.whitespace_before_colon
        and old.whitespace_after_class is new.whitespace_after_class
        and old.whitespace_after_name is new.whitespace_after_name
        and old.lpar is new.lpar
        and old.rpar is new.rpar
        and old.type_parameters is new.type_parameters
        and old.whitespace_after_type_parameters is new.whitespace_after_type_parameters
    )


def _code(module: cst.Module, node: cst.CSTNode, block: cst.IndentedBlock | None) -> str:
    """The text of a statement where it stands: at module level, or in ``block`` (the body
    of a top-level class), indented as there."""
    if block is None:
        return module.code_for_node(node)
    wrapper = cst.Module(
        body=[
            cst.ClassDef(
                name=cst.Name("_"),
                body=block.with_changes(body=[node], header=cst.TrailingWhitespace(), footer=()),
            )
        ],
        header=(),
        footer=(),
        default_indent=module.default_indent,
        default_newline=module.default_newline,
    )
    head = "class _:" + module.default_newline
    text = wrapper.code
    if not text.startswith(head):
        raise _Unsure
    return text[len(head) :]


def _apply(source: str, edits: list[tuple[str, str, str]]) -> str:
    """Apply the edits in order: ``new`` replaces ``found``, or goes right after or before
    it; each ``found`` must occur exactly once after the previous edit."""
    pieces: list[str] = []
    cursor = 0
    for found, new, how in edits:
        start = source.find(found, cursor)
        if start < 0 or not found or source.find(found, start + 1) >= 0:
            raise _Unsure
        end = start + len(found)
        kept = {"replace": "", "after": found, "before": ""}[how]
        pieces += [source[cursor:start], kept, new, found if how == "before" else ""]
        cursor = end
    pieces.append(source[cursor:])
    return "".join(pieces)
