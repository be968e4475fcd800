"""Find the SGLang sources under a user-given root and name files the way a patch names them.

Two layouts are recognised:

* a git checkout of the SGLang repository: ``ROOT/python/sglang/srt/...``; the package lives
  under ``python/``, and the CPU unit tests of ``srt/models/`` under
  ``ROOT/test/registered/unit/models/`` (SGLang's unit tests mirror ``srt/``);
* an installed or unpacked package tree (site-packages, an unpacked wheel): ``ROOT/sglang/...``;
  it has no repository test directory, and tests are never written into the package
  (``tests`` is None: a patch of such a tree leaves them out).

Given ``ROOT`` pointing at the ``sglang`` package directory itself (``ROOT/srt/...``), the tree
is treated as a package tree rooted at its parent, so patch paths still start with ``sglang/``.

All paths a :class:`SGLangTree` hands out for patches are POSIX strings relative to
``tree.root``, ready for ``diff --git a/<path> b/<path>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: Where a checkout keeps the CPU unit tests of ``python/sglang/srt/models/``.
CHECKOUT_TESTS = "test/registered/unit/models"


class TreeError(ValueError):
    """ROOT is not an SGLang checkout or package tree."""


@dataclass(frozen=True)
class SGLangTree:
    """An SGLang source tree.

    root: the directory patch paths are relative to (``git apply`` runs there).
    package: patch path of the ``sglang`` package directory (``python/sglang`` or ``sglang``).
    kind: ``"checkout"`` or ``"package"``.
    tests: patch path of the directory new CPU tests of the models go to; None in a
        package tree, which has none.
    """

    root: Path
    package: str
    kind: str
    tests: str | None

    def module_path(self, dotted: str) -> str:
        """Patch path of a module given as ``sglang.srt.models.kimi_linear``."""
        parts = dotted.split(".")
        if parts[0] != "sglang":
            raise ValueError(f"not an sglang module: {dotted}")
        return str(PurePosixPath(self.package, *parts[1:])) + ".py"

    def test_path(self, filename: str) -> str:
        """Patch path of a test file; ``ValueError`` in a tree without a test folder."""
        if self.tests is None:
            raise ValueError(f"{self.describe()} has no test folder")
        return str(PurePosixPath(self.tests, filename))

    def file(self, patch_path: str) -> Path:
        """Filesystem path of a patch path."""
        return self.root.joinpath(*PurePosixPath(patch_path).parts)

    def read_text(self, patch_path: str) -> str | None:
        """Contents of a file in the tree, or None when it does not exist."""
        path = self.file(patch_path)
        if not path.is_file():
            return None
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()

    def describe(self) -> str:
        return f"SGLang {self.kind} at {self.root} (package {self.package}/)"


def _is_package_dir(path: Path) -> bool:
    return (path / "__init__.py").is_file() and (path / "srt").is_dir()


def detect_tree(root: str | Path) -> SGLangTree:
    """Classify ``root``; raises :class:`TreeError` naming what was looked for."""
    path = Path(root).expanduser().resolve()
    if not path.is_dir():
        raise TreeError(f"{root}: not a directory")
    if _is_package_dir(path / "python" / "sglang"):
        return SGLangTree(root=path, package="python/sglang", kind="checkout", tests=CHECKOUT_TESTS)
    if _is_package_dir(path / "sglang"):
        return SGLangTree(root=path, package="sglang", kind="package", tests=None)
    if path.name == "sglang" and _is_package_dir(path):
        return SGLangTree(root=path.parent, package="sglang", kind="package", tests=None)
    raise TreeError(
        f"{root}: not an SGLang tree (looked for python/sglang/srt/ of a checkout, "
        f"sglang/srt/ of an installed or unpacked package, or srt/ inside the sglang package)"
    )
