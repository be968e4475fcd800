"""The helpers module every rewritten model calls, as the patch ships it.

``shipped/pp_aux_capture.py`` goes into SGLang byte for byte at
``<package>/srt/distributed/pp_aux_capture.py`` (``names.GLUE_MODULE``); every part that
rewrites a model file adds :func:`runtime_change` next to it (the generator keeps the first
change of a path).
"""

from __future__ import annotations

from pathlib import Path

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.tree.sglang_tree import SGLangTree

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "shipped"
GLUE_SOURCE = SHIPPED_DIR / "pp_aux_capture.py"


def render_glue() -> str:
    """The helpers module as shipped."""
    return GLUE_SOURCE.read_text(encoding="utf-8")


def shipped_file(tree: SGLangTree, module: str, text: str) -> FileChange:
    """The change that makes ``module`` of ``tree`` hold ``text``."""
    path = tree.module_path(module)
    return FileChange(path, tree.read_text(path), text, RUNTIME, Role.RUNTIME_MODULE)


def runtime_change(tree: SGLangTree) -> FileChange:
    """The helpers module of ``tree`` as shipped."""
    return shipped_file(tree, GLUE_MODULE, render_glue())
