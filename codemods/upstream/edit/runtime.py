"""The helpers every rewritten model calls, where the patch puts them.

SGLang keeps its aux-capture helpers beside ``AuxHiddenStatePacker`` in
``<package>/srt/layers/aux_hidden_states.py`` (``names.GLUE_MODULE``), so the helpers of
``shipped/pp_aux_capture.py`` go there:

* a release that has the module (0.5.17+) gets them appended after its own code (from the
  shipped module's section comment to its end); the imports they need are merged into the
  module's import block where isort puts them (``edit/imports.py``: a name already imported
  is not imported again), and the module keeps its docstring;
* a release without it gets the module created, holding ``shipped/pp_aux_capture.py`` as it is.

A module that already holds the helpers as shipped is left as it is (a patched tree
regenerates to nothing); one that holds another version of them (from their section
comment on) gets that section replaced.  Every part that rewrites a model file adds
:func:`runtime_change` next to it; a part that changes the module further (the packer
accessor) builds on the text the earlier parts gave it (``Plan.text``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import libcst as cst

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.walk import code_of
from codemods.upstream.tree.sglang_tree import SGLangTree

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "shipped"
GLUE_SOURCE = SHIPPED_DIR / "pp_aux_capture.py"
#: The first line of the helpers' section (the comment that opens it).
SECTION_START = "# Aux hidden states under pipeline parallelism."


class HelpersError(ValueError):
    """The module the helpers go into cannot take them."""


def render_glue() -> str:
    """The helpers as shipped: the module a release without one gets."""
    return GLUE_SOURCE.read_text(encoding="utf-8")


@cache
def _shipped() -> tuple[str, tuple[cst.SimpleStatementLine, ...]]:
    """The helpers' section and the shipped module's top-level imports."""
    text = render_glue()
    start = text.index(f"\n{SECTION_START}\n") + 1
    head = parse_text(text[:start])
    imports = tuple(
        statement
        for statement in head.body
        if isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))
    )
    return text[start:], imports


def helpers_section() -> str:
    """What the patch appends to a module that exists: the helpers from their section
    comment to the end of the shipped module."""
    return _shipped()[0]


def _with_imports(text: str, path: str) -> str:
    """``text`` importing what the helpers' section uses."""
    module = parse_text(text)
    for statement in _shipped()[1]:
        node = statement.body[0]
        if isinstance(node, cst.ImportFrom):
            assert node.module is not None and not isinstance(node.names, cst.ImportStar)
            names = [code_of(alias.name) for alias in node.names]
            module = add_from_import(module, code_of(node.module), names)
            continue
        assert isinstance(node, cst.Import)
        for alias in node.names:
            name = code_of(alias.name)
            if f"\nimport {name}\n" not in f"\n{text}":
                raise HelpersError(f"{path}: does not import {name}, which the helpers use")
    return module.code


def with_helpers(text: str | None, path: str = GLUE_MODULE) -> str:
    """The module at ``path`` (its ``text``; None: absent) holding the helpers."""
    if text is None:
        return render_glue()
    section = helpers_section()
    if text.endswith(section):
        return text
    start = text.find(f"\n{SECTION_START}\n")
    kept = text if start < 0 else text[: start + 1]
    return _with_imports(kept, path).rstrip("\n") + "\n\n\n" + section


def runtime_change(tree: SGLangTree, base: str | None = None) -> FileChange:
    """The helpers module of ``tree``: SGLang's aux-capture module with the helpers.

    ``base``: the module's text as the parts decided so far leave it (``Plan.text``), so
    the helpers join what an earlier part added (the packer's accessor) instead of
    replacing it; by default the tree's own text."""
    path = tree.module_path(GLUE_MODULE)
    old = tree.read_text(path)
    start = old if base is None else base
    return FileChange(path, old, with_helpers(start, path), RUNTIME, Role.RUNTIME_MODULE)


def holds_helpers(tree: SGLangTree) -> bool:
    """Whether the tree's aux-capture module already holds the helpers as shipped."""
    text = tree.read_text(tree.module_path(GLUE_MODULE))
    return text is not None and with_helpers(text) == text
