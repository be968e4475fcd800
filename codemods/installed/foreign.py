"""Other projects' patches of the same package, recognised from the copy they keep of it.

A tool that patches an installed SGLang often leaves the patch text it applied inside the
package, so that it can tell later whether it is applied (a file the release does not have,
e.g. ``sglang/.spec_capture_patch.applied`` holding a unified diff).  ``recorded_patches``
finds such copies among the files a ``pristine.Baseline`` calls added and reads which files
each patch adds, modifies or deletes; ``owner`` says which recorded patch explains a
difference from the release, so ``status`` and ``apply`` can name it, and a difference no
patch explains stays unexplained.

A patch path is matched to a tree path by its ``sglang/...`` tail, whatever prefix it was
written with (``a/python/sglang/...`` for ``patch -p2``, ``a/sglang/...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from codemods.installed import pristine
from codemods.installed.locate import Installation

#: Copies larger than this are not read (a patch copy is text of some kilobytes).
MAX_BYTES = 8 * 1024 * 1024
_OLD = re.compile(r"^--- (?:\S+)", re.M)
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.M)
_FILE = re.compile(r"^(---|\+\+\+) (\S+)", re.M)
NULL = "/dev/null"
ADDS, MODIFIES, DELETES = "adds", "modifies", "deletes"


@dataclass
class RecordedPatch:
    """A patch whose copy ``record`` (tree path) is in the package: its ``name`` (the copy's
    file name without leading dots and ``.applied``/``.patch``) and ``files``: tree path ->
    ``adds``, ``modifies`` or ``deletes``."""

    record: str
    name: str
    files: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for what in self.files.values():
            counts[what] = counts.get(what, 0) + 1
        parts = [f"{what} {n}" for what, n in sorted(counts.items())]
        return f"{self.name} (its copy: {self.record}; it {', '.join(parts)} files)"


def _name(record: str) -> str:
    name = PurePosixPath(record).name.lstrip(".")
    for suffix in (".applied", ".patch", ".diff"):
        name = name.removesuffix(suffix)
    return name or PurePosixPath(record).name


def _tree_path(installation: Installation, patch_path: str) -> str | None:
    """The tree path a patch path names: its tail from the package's directory name on."""
    package = PurePosixPath(installation.tree.package)
    parts = PurePosixPath(patch_path).parts
    for index, part in enumerate(parts):
        if part == package.name:
            return PurePosixPath(package, *parts[index + 1 :]).as_posix()
    return None


def parse(installation: Installation, record: str, text: str) -> RecordedPatch | None:
    """The patch in ``text`` (None: not a unified diff that names a file of the package)."""
    if not _OLD.search(text) or not _HUNK.search(text):
        return None
    found = RecordedPatch(record, _name(record))
    old: str | None = None
    for match in _FILE.finditer(text):
        sign, path = match.groups()
        if sign == "---":
            old = path
            continue
        if old is None:
            continue
        target = _tree_path(installation, old if path == NULL else path)
        if target is not None:
            found.files[target] = ADDS if old == NULL else DELETES if path == NULL else MODIFIES
        old = None
    return found if found.files else None


def recorded_patches(installation: Installation, base: pristine.Baseline) -> list[RecordedPatch]:
    """The patches whose copies are among the files ``base`` calls added, by record path."""
    patches = []
    for path, kind in sorted(base.differs.items()):
        if kind != pristine.ADDED or path.endswith(".py"):
            continue
        file = installation.tree.file(path)
        try:
            if file.stat().st_size > MAX_BYTES:
                continue
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        patch = parse(installation, path, text)
        if patch is not None:
            patches.append(patch)
    return patches


def owner(patches: list[RecordedPatch], path: str) -> RecordedPatch | None:
    """The recorded patch that changes ``path`` or is kept there (the first one), or None."""
    for patch in patches:
        if path == patch.record or path in patch.files:
            return patch
    return None
