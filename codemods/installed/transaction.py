"""Write a journalled change all or nothing, restore it, and repair an interrupted one.

``write_all``: checks every target directory is writable, saves the journal (``applying``),
writes each file with the project's atomic writers (``sources.fileio``), compiles every
written file with the target interpreter, then marks the journal ``applied``.  Any error
after the journal is saved rolls every file back and deletes the journal; a process killed
half way leaves the journal in ``applying`` for ``recover``.

``locked``: one command at a time per package.

``restore``: every file back to its recorded bytes (a file the change added is deleted, a
directory it created is removed when empty), then the journal is deleted.  Files that hold
neither the bytes before nor the bytes after are someone else's: left as they are unless
``force``.
"""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from codemods.installed import journal as jr
from codemods.installed.errors import InstalledError, Refused
from codemods.installed.journal import Entry, Journal
from codemods.installed.phases import NO_PHASES, Phases
from codemods.sources.fileio import (
    SourceFileError,
    read_source,
    remove_stale_temp_files,
    write_atomic,
    write_output_atomic,
)
from codemods.upstream.tree.sglang_tree import SGLangTree

COMPILE = r"""
import sys
for name in sys.argv[1:]:
    with open(name, "rb") as handle:
        source = handle.read()
    try:
        compile(source, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:
        print(f"{name}: {type(err).__name__}: {err}")
        sys.exit(1)
"""


@dataclass
class Restored:
    """What a restore did: files restored, deleted, and left (changed by someone else)."""

    restored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


@contextmanager
def locked(package: Path) -> Iterator[None]:
    """Hold an exclusive lock on the package directory for one command (``flock`` on the
    directory itself, so no lock file is left); ``Refused`` while another command holds it."""
    fd = os.open(package, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(
                f"{package}: another auxcap command is working on this package; nothing was done"
            ) from None
        yield
    finally:
        os.close(fd)


def _after_write(count: int) -> None:
    """Called after each file written by ``write_all`` (``count`` files so far).  Does
    nothing; it marks the moment between two writes (tests hook it)."""


def current_bytes(tree: SGLangTree, path: str) -> bytes | None:
    file = tree.file(path)
    try:
        return file.read_bytes()
    except FileNotFoundError:
        return None


def _writable(path: Path) -> bool:
    """A write bit set (root included: no bit, no write) and writable for this user."""
    info = path.stat()
    return bool(info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(
        path, os.W_OK
    )


def check_writable(tree: SGLangTree, paths: list[str], package: Path) -> None:
    """``InstalledError`` naming the first directory among the targets' (or, for files in
    directories still to be created, their nearest existing one), or the first existing
    target file, that is read-only."""
    directories = {package}
    for path in paths:
        directory = tree.file(path).parent
        while not directory.exists():
            directory = directory.parent
        directories.add(directory)
    for directory in sorted(directories):
        if not _writable(directory):
            raise InstalledError(f"{directory}: directory is read-only; nothing was written")
    for path in paths:
        file = tree.file(path)
        if file.exists() and not _writable(file):
            raise InstalledError(f"{file}: file is read-only; nothing was written")


def _dirs_to_create(tree: SGLangTree, paths: list[str]) -> list[str]:
    missing: list[Path] = []
    for path in paths:
        directory = tree.file(path).parent
        while not directory.exists() and directory not in missing:
            missing.append(directory)
            directory = directory.parent
    return [
        p.relative_to(tree.root).as_posix() for p in sorted(missing, key=lambda p: len(p.parts))
    ]


def _write(tree: SGLangTree, path: str, data: bytes) -> None:
    file = tree.file(path)
    if file.exists():
        write_atomic(read_source(file), data)
    else:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_output_atomic(file, data)


def compile_files(python: str, files: list[Path]) -> str | None:
    """Compile ``files`` with ``python`` (nothing is written: no ``.pyc``); the failure, naming
    the file, or None."""
    proc = subprocess.run(
        [python, "-c", COMPILE, *map(str, files)], capture_output=True, text=True, timeout=600
    )
    if proc.returncode == 0:
        return None
    return (
        proc.stdout.strip()
        or proc.stderr.strip()[-1000:]
        or f"{python} exited {proc.returncode} compiling the files"
    )


def write_all(
    tree: SGLangTree,
    package: Path,
    journal: Journal,
    new_bytes: dict[str, bytes],
    python: str,
    phases: Phases = NO_PHASES,
) -> None:
    """Apply ``new_bytes`` (tree path -> bytes) under ``journal`` (its entries hold the
    bytes before); ``InstalledError`` when a directory is read-only (nothing written),
    ``Refused`` when a file does not compile or cannot be written (everything rolled back).
    The writes and the compile are reported to ``phases``."""
    check_writable(tree, list(new_bytes), package)
    journal.created_dirs = _dirs_to_create(tree, list(new_bytes))
    journal.state = jr.APPLYING
    jr.save(package, journal)
    try:
        phases.phase("writing the files", len(journal.entries))
        for count, entry in enumerate(journal.entries, 1):
            _write(tree, entry.path, new_bytes[entry.path])
            phases.advance()
            _after_write(count)
        phases.phase(f"compiling {len(new_bytes)} files with {python}")
        failure = compile_files(python, [tree.file(path) for path in new_bytes])
        if failure is not None:
            raise Refused(f"{failure}; does not compile with {python}")
    except (Refused, SourceFileError, OSError) as err:
        done = restore(tree, package, journal, force=False)
        rolled = f"rolled back {len(done.restored) + len(done.deleted)} files"
        if done.left:
            rolled += f"; left as found (changed meanwhile): {', '.join(done.left)}"
        raise Refused(f"{err}; {rolled}") from err
    journal.state = jr.APPLIED
    jr.save(package, journal)


def changed_since(tree: SGLangTree, journal: Journal) -> list[str]:
    """The journal's files that hold neither their bytes before nor after."""
    changed = []
    for entry in journal.entries:
        current = current_bytes(tree, entry.path)
        digest = None if current is None else jr.sha256(current)
        if digest not in (entry.after_sha256, entry.before_sha256):
            changed.append(entry.path)
    return changed


def _restore_entry(tree: SGLangTree, entry: Entry, done: Restored) -> None:
    file = tree.file(entry.path)
    current = current_bytes(tree, entry.path)
    before = entry.before
    if before is None:
        if current is not None:
            file.unlink()
            done.deleted.append(entry.path)
        return
    if current != before:
        _write(tree, entry.path, before)
        done.restored.append(entry.path)


def restore(tree: SGLangTree, package: Path, journal: Journal, force: bool) -> Restored:
    """Every file of ``journal`` back to its bytes before (see the module docstring)."""
    done = Restored()
    left = set() if force else set(changed_since(tree, journal))
    if journal.state == jr.APPLIED:
        journal.state = jr.REVERTING
        jr.save(package, journal)
    for entry in journal.entries:
        if entry.path in left:
            done.left.append(entry.path)
        else:
            _restore_entry(tree, entry, done)
    for rel in reversed(journal.created_dirs):
        try:
            tree.root.joinpath(rel).rmdir()
        except OSError:
            pass
    for directory in {tree.file(entry.path).parent for entry in journal.entries}:
        remove_stale_temp_files(directory)
    jr.delete(package)
    return done


def recover(tree: SGLangTree, package: Path) -> tuple[Journal, Restored] | None:
    """Roll back a change a command left half done (journal ``applying`` or
    ``reverting``); None when there is none."""
    journal = jr.load(package)
    if journal is None or journal.state == jr.APPLIED:
        return None
    return journal, restore(tree, package, journal, force=False)
