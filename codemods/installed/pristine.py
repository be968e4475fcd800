"""How the installed files differ from their release, file by file.

* A wheel install: the release's hashes are in ``sglang-<ver>.dist-info/RECORD`` (``path,
  sha256=<urlsafe base64 without padding>,size``); every listed file of the package is hashed
  and compared, and a file the RECORD does not list is an added file (another patch's
  new modules, or its marker files such as ``.spec_capture_patch.<name>.applied``).
* Any other tree in a git work tree (an editable checkout, a vendored package tree):
  ``git status`` of the package and test directories (modified, deleted, untracked).
* Anything else: the differences cannot be told (``Baseline.known`` is False).

Paths are tree paths (relative to ``tree.root``, POSIX), as in the upstream patch.
Compiled files (``__pycache__``) and auxcap's own journal are never differences.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from codemods.deliver.git_basics import GitDeliveryError, _git, _git_ok
from codemods.installed.journal import JOURNAL_NAME
from codemods.installed.locate import WHEEL, Installation
from codemods.sources.fileio import TEMP_PATTERN

MODIFIED, MISSING, ADDED = "modified", "missing", "added"


@dataclass
class Baseline:
    """``differs``: tree path -> modified, missing or added; ``known``: whether the release's
    contents could be told at all; ``how``: where they came from, in words; ``hashes``: the
    release's sha256 (hex) per tree path, where a RECORD gives them."""

    known: bool
    how: str
    differs: dict[str, str] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)


def _ignored(path: str) -> bool:
    """Compiled files, auxcap's journal and the atomic writer's temporary files."""
    parts = path.split("/")
    return (
        "__pycache__" in parts
        or parts[-1] == JOURNAL_NAME
        or path.endswith(".pyc")
        or TEMP_PATTERN.match(parts[-1]) is not None
    )


def record_hashes(record: str, prefix: str) -> dict[str, str]:
    """``path -> sha256 hex`` of the RECORD rows (CSV: a path with a comma is quoted) under
    ``prefix`` that carry a sha256."""
    hashes = {}
    for row in csv.reader(record.splitlines()):
        if len(row) < 2:
            continue
        path, digest = row[0], row[1]
        if not path.startswith(prefix) or not digest.startswith("sha256="):
            continue
        raw = digest.removeprefix("sha256=")
        hashes[path] = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
    return hashes


def sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _wheel_baseline(installation: Installation, dist_info: Path) -> Baseline:
    tree = installation.tree
    record = (dist_info / "RECORD").read_text(encoding="utf-8")
    hashes = {
        path: digest
        for path, digest in record_hashes(record, tree.package + "/").items()
        if not _ignored(path)
    }
    baseline = Baseline(True, f"{dist_info.name}/RECORD", hashes=hashes)
    for path, digest in hashes.items():
        current = sha256_file(tree.file(path))
        if current is None:
            baseline.differs[path] = MISSING
        elif current != digest:
            baseline.differs[path] = MODIFIED
    for directory, dirs, files in os.walk(installation.package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            path = Path(directory, name).relative_to(tree.root).as_posix()
            if path not in hashes and not _ignored(path):
                baseline.differs[path] = ADDED
    return baseline


def _git_baseline(installation: Installation) -> Baseline:
    tree = installation.tree
    try:
        top = _git(tree.root, "rev-parse", "--show-toplevel", kill_after_timeout=120)
    except GitDeliveryError:
        return Baseline(False, f"{tree.root} is not a git repository and carries no RECORD")
    if not _git_ok(tree.root, "ls-files", "--error-unmatch", f"{tree.package}/__init__.py"):
        return Baseline(
            False,
            f"{tree.package}/__init__.py is not tracked by the git "
            f"repository at {top}, and there is no RECORD",
        )
    try:
        status = _git(
            tree.root,
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--",
            tree.package,
            *([tree.tests] if tree.tests else []),
            kill_after_timeout=120,
        )
    except GitDeliveryError as error:
        return Baseline(False, f"git status failed in {tree.root}: {error}")
    baseline = Baseline(True, f"git status of {top}")
    entries = status.split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        code, name = entry[:2], entry[3:]
        if code[0] in "RC":
            index += 1  # the rename's source follows
        full = Path(top, name)
        path = Path(os.path.relpath(full, tree.root)).as_posix()
        if _ignored(path):
            continue
        kind = ADDED if code == "??" or "A" in code else MISSING if "D" in code else MODIFIED
        baseline.differs[path] = kind
    return baseline


def baseline(installation: Installation) -> Baseline:
    """How the installed files differ from the release (see the module docstring)."""
    if installation.kind == WHEEL and installation.dist_info is not None:  # (a wheel has one)
        return _wheel_baseline(installation, installation.dist_info)
    return _git_baseline(installation)
