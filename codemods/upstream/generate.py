"""Build the upstream patch for one SGLang tree: which files change and how.

``generate(root, mode)`` detects the tree (``tree.py``), rewrites
``srt/models/kimi_linear.py`` (``kimi.py``) and adds two new files:

* the PP transport module, this package's ``pp_aux_transport.py`` read as package data, at
  ``<package>/srt/distributed/pp_aux_transport.py``;
* a CPU multi-process unittest (``templates/test_pp_aux_capture.py``) at
  ``test/srt/test_pp_aux_capture.py`` in a checkout or ``sglang/test/test_pp_aux_capture.py``
  in a package tree.

The result's ``patch`` is the git-style patch text (``patchfile.py``), empty when the tree is
already patched.  A tree whose model file already carries DSPARK captures across PP (SGLang
0.5.21+) gets status ``supported`` and no changes at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from codemods.upstream import kimi
from codemods.upstream.patchfile import FileChange, changed_paths, render_patch
from codemods.upstream.tree import SGLangTree, detect_tree

TRANSPORT_RESOURCE = "pp_aux_transport.py"
TEST_RESOURCE = "templates/test_pp_aux_capture.py"
TEST_FILENAME = "test_pp_aux_capture.py"


class MissingModelFile(FileNotFoundError):
    """The tree has no file at the path the rewriter targets."""


def package_text(name: str) -> str:
    """Text of a file shipped inside ``codemods.upstream``."""
    return resources.files("codemods.upstream").joinpath(name).read_text(encoding="utf-8")


@dataclass
class UpstreamResult:
    tree: SGLangTree
    status: str  # kimi.NEEDS_PATCH | kimi.PATCHED | kimi.SUPPORTED
    mode: str
    model_path: str
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def patch(self) -> str:
        return render_patch(self.changes)

    @property
    def changed(self) -> list[str]:
        return changed_paths(self.changes)

    @property
    def test_path(self) -> str:
        return self.tree.test_path(TEST_FILENAME)

    @property
    def transport_path(self) -> str:
        return self.tree.module_path(kimi.TRANSPORT_MODULE)


def generate(root: str | Path, mode: str = "relay") -> UpstreamResult:
    """Raises ``TreeError``, ``MissingModelFile`` or ``kimi.UnrecognisedShape``."""
    tree = detect_tree(root)
    model_path = tree.module_path(kimi.MODULE)
    source = tree.read_text(model_path)
    if source is None:
        raise MissingModelFile(f"{tree.file(model_path)}: Kimi-Linear model file not found")
    new_source, analysis = kimi.rewrite(source, str(tree.file(model_path)), mode=mode)
    result = UpstreamResult(tree, analysis.status, mode, model_path, notes=list(analysis.notes))
    if analysis.status == kimi.SUPPORTED:
        return result
    transport_path = result.transport_path
    test_path = result.test_path
    result.changes = [
        FileChange(model_path, source, new_source),
        FileChange(transport_path, tree.read_text(transport_path),
                   package_text(TRANSPORT_RESOURCE)),
        FileChange(test_path, tree.read_text(test_path), package_text(TEST_RESOURCE)),
    ]
    return result
