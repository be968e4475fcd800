"""Run the per-file transform over many paths.

``run(paths, options, write)`` walks the paths (``.py``/``.pyi`` files; ``.git``, virtual
environments, ``build`` and ``__pycache__`` folders are skipped), transforms each file in
sorted path order and yields one :class:`~codemods.records.FileResult` per file.  With
``write=True`` changed files are written atomically (a temporary file in the same folder,
then ``os.replace``), keeping the file's permission bits.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from codemods.records import FileResult, Status
from codemods.transform import TransformOptions, scan_source, transform_source

SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".venv", "venv", "build", "__pycache__", ".tox"})
SOURCE_SUFFIXES = (".py", ".pyi")


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


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never half."""
    target = Path(path)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def scan_file(path: str, options: TransformOptions) -> FileResult:
    """Discover the call sites of one file; never writes."""
    try:
        source = Path(path).read_bytes()
    except OSError as error:
        return FileResult(path, Status.FAILED, error=f"cannot read: {error.strerror or error}")
    return scan_source(source, path, options)


def scan(
    paths: Iterable[str | os.PathLike[str]], options: TransformOptions
) -> Iterator[FileResult]:
    """Scan every source file under ``paths`` in sorted path order."""
    for path in collect_files(paths):
        yield scan_file(path, options)


def _process(path: str, options: TransformOptions, write: bool) -> FileResult:
    try:
        source = Path(path).read_bytes()
    except OSError as error:
        return FileResult(path, Status.FAILED, error=f"cannot read: {error.strerror or error}")
    result = transform_source(source, path, options)
    if write and result.status is Status.CHANGED and result.rewritten is not None:
        try:
            write_atomic(path, result.rewritten)
        except OSError as error:
            return FileResult(
                path,
                Status.FAILED,
                result.call_sites,
                original=source,
                error=f"cannot write: {error.strerror or error}",
            )
    return result


def run(
    paths: Iterable[str | os.PathLike[str]], options: TransformOptions, write: bool = False
) -> Iterator[FileResult]:
    """Transform every source file under ``paths``; write the changed ones when ``write``."""
    for path in collect_files(paths):
        yield _process(path, options, write)
