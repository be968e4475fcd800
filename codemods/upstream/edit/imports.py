"""Add a ``from module import names`` statement to a module the way isort (profile black)
would place it, leaving every other line untouched.

Placement: among the module's top-level ``from`` imports of the same section (``sglang``'s
for ``from sglang... import``, the standard library's for ``from dataclasses import``),
before the first one whose module sorts after the new module (isort compares module names
case-insensitively, and within a section ``from`` imports follow plain imports); after the
last of them when none sorts after.  Inserted first in its section, the statement takes
over the blank lines that separated the section from the one above.  A module without ``sglang`` imports gets the statement
after its last top-level import, as a section of its own.  Names already imported from the
module are not added twice; an existing ``from module import ...`` statement is extended.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import libcst as cst

from codemods.upstream.edit.pyformat import parse_statements, render_from_import
from codemods.upstream.edit.walk import code_of


def _import_from(statement: cst.CSTNode) -> cst.ImportFrom | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        node = statement.body[0]
        if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
            return node
    return None


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(node, (cst.Import, cst.ImportFrom)) for node in statement.body
    )


def module_name(node: cst.ImportFrom) -> str:
    return code_of(node.module)  # type: ignore[arg-type]


def imported_names(module: cst.Module, from_module: str) -> set[str]:
    """Names (as bound, ``as`` aliases respected) imported at top level from ``from_module``."""
    names: set[str] = set()
    for statement in module.body:
        node = _import_from(statement)
        if node is None or module_name(node) != from_module:
            continue
        if isinstance(node.names, cst.ImportStar):
            continue
        for alias in node.names:
            names.add(alias.evaluated_alias or alias.evaluated_name)
    return names


def _section(name: str) -> str:
    """isort's section of module ``name``: ``__future__``, the standard library, or the
    top-level package."""
    top = name.split(".")[0]
    if top != "__future__" and top in sys.stdlib_module_names:
        return "stdlib"
    return top


def _sort_key(name: str) -> tuple[int, str]:
    # isort's default order within one statement: CONSTANTS, Classes, functions.
    if name.isupper():
        return (0, name.lower())
    if name[:1].isupper():
        return (1, name.lower())
    return (2, name.lower())


def _before(
    statement: cst.SimpleStatementLine, following: cst.SimpleStatementLine
) -> list[cst.SimpleStatementLine]:
    """``statement`` inserted before ``following``: the blank lines that open
    ``following`` (the gap between import sections) now open ``statement``, so the new
    import joins its section instead of sitting above the gap; comment lines stay with
    the statement they precede."""
    leading = list(following.leading_lines)
    blanks = 0
    while blanks < len(leading) and leading[blanks].comment is None:
        blanks += 1
    if not blanks:
        return [statement, following]
    moved = statement.with_changes(leading_lines=leading[:blanks])
    return [moved, following.with_changes(leading_lines=leading[blanks:])]


def add_from_import(module: cst.Module, from_module: str, names: Sequence[str]) -> cst.Module:
    """``module`` with ``from from_module import names`` present (see module docstring)."""
    present = imported_names(module, from_module)
    wanted = [name for name in names if name not in present]
    if not wanted:
        return module
    body = list(module.body)
    existing = [
        index
        for index, statement in enumerate(body)
        if (node := _import_from(statement)) is not None and module_name(node) == from_module
    ]
    if existing:
        index = existing[0]
        node = _import_from(body[index])
        assert node is not None and not isinstance(node.names, cst.ImportStar)
        all_names = sorted({a.evaluated_name for a in node.names} | set(wanted), key=_sort_key)
        replacement = parse_statements(render_from_import(from_module, all_names), "")
        body[index : index + 1] = [
            replacement[0].with_changes(leading_lines=body[index].leading_lines)
        ]
        return module.with_changes(body=body)

    statement = parse_statements(
        render_from_import(from_module, sorted(wanted, key=_sort_key)), ""
    )[0]
    section = _section(from_module)
    same_package = [
        index
        for index, stmt in enumerate(body)
        if (node := _import_from(stmt)) is not None and _section(module_name(node)) == section
    ]
    if same_package:
        key = from_module.lower()
        for index in same_package:
            node = _import_from(body[index])
            assert node is not None
            if module_name(node).lower() > key:
                following = body[index]
                assert isinstance(following, cst.SimpleStatementLine)
                body[index : index + 1] = _before(statement, following)
                break
        else:
            body.insert(same_package[-1] + 1, statement)
        return module.with_changes(body=body)

    imports = [index for index, stmt in enumerate(body) if _is_import(stmt)]
    position = imports[-1] + 1 if imports else 0
    statement = statement.with_changes(leading_lines=[cst.EmptyLine()] if imports else [])
    body.insert(position, statement)
    return module.with_changes(body=body)
