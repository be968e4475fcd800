"""Run the per-file transform over many paths.

``run(paths, options, write)`` walks the paths (``.py``/``.pyi`` files; ``.git``, virtual
environments, ``build`` and ``__pycache__`` folders are skipped), transforms each file in
sorted path order and yields one :class:`~codemods.records.FileResult` per file.  Reads and
writes go through :mod:`codemods.fileio`: only regular files are read (symlinks followed),
and with ``write=True`` changed files are replaced atomically, keeping mode and owner, and
only when nobody changed them since they were read.  A file that cannot be read or written
gives a ``FAILED`` result naming the reason and stays byte-for-byte untouched; the other
files are still processed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

from codemods import fileio
from codemods.discover import mentions_hooks
from codemods.records import FileResult, Status
from codemods.transform import TransformOptions, scan_source, transform_source

SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "build", "__pycache__", ".tox"})
SOURCE_SUFFIXES = (".py", ".pyi")

#: Files larger than this that mention a hook are reported, not parsed (generated code, data).
MAX_SOURCE_BYTES = 2 * 1024 * 1024


def collect_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Source files under ``paths``, sorted and without duplicates.

    A path named explicitly is kept whatever its suffix; a path that does not exist is kept
    too, so that the caller reports it.
    """
    found: set[str] = set()
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            found.add(str(path))
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(name for name in dirs if name not in SKIP_DIRS)
            for name in files:
                if name.endswith(SOURCE_SUFFIXES):
                    found.add(str(Path(root, name)))
    return sorted(found)


def _read(path: str, options: TransformOptions) -> fileio.SourceSnapshot | FileResult:
    """The file's snapshot, or a ``FAILED`` result saying why it cannot be processed."""
    try:
        snapshot = fileio.read_source(path)
    except fileio.SourceFileError as error:
        return FileResult(path, Status.FAILED, error=f"cannot read: {error.reason}")
    if snapshot.size > MAX_SOURCE_BYTES and mentions_hooks(snapshot.data, options.hooks):
        size, limit = snapshot.size / 2**20, MAX_SOURCE_BYTES / 2**20
        return FileResult(
            path,
            Status.FAILED,
            original=snapshot.data,
            error=f"too large to rewrite safely ({size:.1f} MiB; the limit is {limit:g} MiB)",
        )
    return snapshot


def scan_file(path: str, options: TransformOptions) -> FileResult:
    """Discover the call sites of one file; never writes."""
    snapshot = _read(path, options)
    if isinstance(snapshot, FileResult):
        return snapshot
    return scan_source(snapshot.data, path, options)


def scan(
    paths: Iterable[str | os.PathLike[str]], options: TransformOptions
) -> Iterator[FileResult]:
    """Scan every source file under ``paths`` in sorted path order."""
    for path in collect_files(paths):
        yield scan_file(path, options)


def _process(path: str, options: TransformOptions, write: bool) -> FileResult:
    snapshot = _read(path, options)
    if isinstance(snapshot, FileResult):
        return snapshot
    result = transform_source(snapshot.data, path, options)
    if write and result.status is Status.CHANGED and result.rewritten is not None:
        try:
            fileio.write_atomic(snapshot, result.rewritten)
        except fileio.SourceFileError as error:
            reason = error.reason
        except OSError as error:
            reason = error.strerror or str(error)
        else:
            return result
        return FileResult(
            path,
            Status.FAILED,
            result.call_sites,
            original=snapshot.data,
            error=f"cannot write: {reason}",
        )
    return result


def remove_stale_temp_files(files: Iterable[str]) -> list[str]:
    """Delete temporary files left beside ``files`` by earlier runs that were killed."""
    removed: list[str] = []
    for directory in sorted({os.path.dirname(os.path.realpath(path)) for path in files}):
        removed.extend(fileio.remove_stale_temp_files(directory))
    return removed


def run(
    paths: Iterable[str | os.PathLike[str]], options: TransformOptions, write: bool = False
) -> Iterator[FileResult]:
    """Transform every source file under ``paths``; write the changed ones when ``write``."""
    files = collect_files(paths)
    if write:
        remove_stale_temp_files(files)
    for path in files:
        yield _process(path, options, write)
