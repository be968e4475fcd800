"""Run the per-file transform over many paths.

``run(paths, options, write)`` (migrate) and ``scan(paths, options)`` go through the same
pipeline and yield one :class:`~codemods.records.FileResult` per collected file, in sorted path
order:

1. **collect** the files (:mod:`codemods.files`: ``.gitignore``, skipped folders, globs);
2. **prefilter** them in this process, reading each file's bytes once and keeping nothing
   (:mod:`codemods.prefilter`): a file that cannot hold a call site yields an ``UNCHANGED``
   result at once, and LibCST is never imported when no file needs it;
3. **transform** the remaining candidates (``transform_source`` or ``scan_source``), in worker
   processes when there is enough work to pay for them (``jobs``, and at least
   ``POOL_MIN_FILES`` candidates with ``POOL_MIN_BYTES`` of source between them), else here.
   Workers read their own files; at most ``WINDOW_PER_JOB`` chunks per worker are in flight,
   so memory stays bounded however many files there are, and results come back in order;
4. with ``write=True`` a changed file is written atomically, keeping mode and owner, and only
   if nobody changed it since it was read; temporary files left by a killed run are removed
   first.

All reads and writes go through :mod:`codemods.fileio`: only regular files are read
(symlinks followed, the target rewritten in place), and a file that cannot be read or written
(or that mentions a hook but exceeds ``MAX_SOURCE_BYTES``) yields a ``FAILED`` result naming
the reason, is left byte for byte untouched, and the other files are still processed.

Results of files that did not change carry no source bytes (only changed or failed files keep
``original``/``rewritten`` for diffs and messages).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from codemods import fileio
from codemods.files import collect_files
from codemods.prefilter import Prefilter
from codemods.progress import Progress
from codemods.records import FileResult, Status

if TYPE_CHECKING:  # the transform imports LibCST: only loaded when a file needs parsing
    from codemods.transform import TransformOptions

#: Worker processes pay for themselves only above this much candidate work.  Starting a
#: forked pool of two costs about 30 ms (0.2 s on a loaded machine); scanning costs about
#: 15-25 ms of CPU per KB of source and migrating three times that, so a few files worth
#: 50 KB already take a second (``scripts/bench_migrate.py --crossover`` measures it).
POOL_MIN_FILES = 3
POOL_MIN_BYTES = 48_000
#: Chunks of work handed to one worker at a time, and chunks in flight per worker.
CHUNK_MAX_FILES = 8
CHUNK_MAX_BYTES = 64_000
WINDOW_PER_JOB = 4
#: Files larger than this that mention a hook are reported, not parsed (generated code, data).
MAX_SOURCE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class Selection:
    """Which files a run looks at (see :mod:`codemods.files`)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    force_exclude: bool = False


@dataclass(frozen=True)
class Execution:
    """How a run is carried out: never changes its results."""

    jobs: int | None = None  # worker processes; None: one per CPU
    prefilter: bool = True  # False: parse every file (for checks and benchmarks)
    progress: bool = False  # a progress bar on stderr (drawn only on a terminal)


def _read(path: str) -> bytes:
    """The bytes of a regular file (symlinks followed); :class:`fileio.SourceFileError` else."""
    return fileio.read_bytes(path)


def _mentions_hooks(data: bytes, options: TransformOptions) -> bool:
    return any(name.encode() in data for name in options.hooks.names)


def _snapshot(path: str, options: TransformOptions) -> fileio.SourceSnapshot | FileResult:
    """The file as read, or a ``FAILED`` result saying why it cannot be processed."""
    try:
        snapshot = fileio.read_source(path)
    except fileio.SourceFileError as error:
        return FileResult(path, Status.FAILED, error=f"cannot read: {error.reason}")
    if snapshot.size > MAX_SOURCE_BYTES and _mentions_hooks(snapshot.data, options):
        size, limit = snapshot.size / 2**20, MAX_SOURCE_BYTES / 2**20
        return FileResult(
            path,
            Status.FAILED,
            error=f"too large to rewrite safely ({size:.1f} MiB; the limit is {limit:g} MiB)",
        )
    return snapshot


def scan_file(path: str, options: TransformOptions, prefilter: bool = True) -> FileResult:
    """Discover the call sites of one file; never writes."""
    from codemods.transform import scan_source

    snapshot = _snapshot(path, options)
    if isinstance(snapshot, FileResult):
        return snapshot
    return _slim(scan_source(snapshot.data, path, options, prefilter=prefilter))


def migrate_file(
    path: str, options: TransformOptions, write: bool, prefilter: bool = True
) -> FileResult:
    """Transform one file; write it back when ``write`` and it changed."""
    from codemods.transform import transform_source

    snapshot = _snapshot(path, options)
    if isinstance(snapshot, FileResult):
        return snapshot
    result = transform_source(snapshot.data, path, options, prefilter=prefilter)
    if write and result.status is Status.CHANGED and result.rewritten is not None:
        try:
            fileio.write_atomic(snapshot, result.rewritten)
        except fileio.SourceFileError as error:
            reason = error.reason
        except OSError as error:
            reason = error.strerror or str(error)
        else:
            return _slim(result)
        return FileResult(
            path,
            Status.FAILED,
            result.call_sites,
            original=snapshot.data,
            error=f"cannot write: {reason}",
        )
    return _slim(result)


def remove_stale_temp_files(files: Iterable[str]) -> list[str]:
    """Delete temporary files left beside ``files`` by earlier runs that were killed."""
    removed: list[str] = []
    for directory in sorted({os.path.dirname(os.path.realpath(path)) for path in files}):
        removed.extend(fileio.remove_stale_temp_files(directory))
    return removed


def _slim(result: FileResult) -> FileResult:
    """Drop the source bytes of a result nobody will diff."""
    if result.status is Status.UNCHANGED and result.original is not None:
        return replace(result, original=None, rewritten=None)
    return result


# ------------------------------------------------------------------------ the pipeline
_Task = Callable[[str], FileResult]
_worker_task: _Task | None = None


def _init_worker(task: _Task) -> None:
    global _worker_task
    _worker_task = task


def _run_chunk(paths: Sequence[str]) -> list[FileResult]:
    assert _worker_task is not None
    return [_guarded(_worker_task, path) for path in paths]


def _guarded(task: _Task, path: str) -> FileResult:
    try:
        return task(path)
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        message = f"internal error: {type(error).__name__}: {error}"
        return FileResult(path, Status.FAILED, error=message)


@dataclass
class _ScanTask:
    options: TransformOptions
    prefilter: bool

    def __call__(self, path: str) -> FileResult:
        return scan_file(path, self.options, self.prefilter)


@dataclass
class _MigrateTask:
    options: TransformOptions
    write: bool
    prefilter: bool

    def __call__(self, path: str) -> FileResult:
        return migrate_file(path, self.options, self.write, self.prefilter)


def _prefilter(files: Sequence[str], prefilter: Prefilter | None) -> tuple[list[bool], int]:
    """Which files need a parse, and their total size; no source is kept."""
    if prefilter is None:
        return [True] * len(files), sum(_size(path) for path in files)
    flags = []
    total = 0
    for path in files:
        try:
            data = _read(path)
        except fileio.SourceFileError:
            flags.append(True)  # the transform reports why it cannot be read
            continue
        needed = prefilter.needs_parse(data)
        flags.append(needed)
        total += len(data) if needed else 0
    return flags, total


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _chunks(paths: Sequence[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for path in paths:
        chunk.append(path)
        size += _size(path)
        if len(chunk) >= CHUNK_MAX_FILES or size >= CHUNK_MAX_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _pool_context():
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _in_workers(task: _Task, paths: Sequence[str], jobs: int) -> Iterator[FileResult]:
    """``task`` over ``paths`` in ``jobs`` processes, results in order, bounded in flight."""
    # Loaded once here and inherited by forked workers, instead of once per worker.
    import codemods.transform  # noqa: F401

    if isinstance(task, _MigrateTask):
        import codemods.fallback  # noqa: F401
        import codemods.guard  # noqa: F401

    context = _pool_context()
    pool = context.Pool(jobs, initializer=_init_worker, initargs=(task,))
    try:
        pending: deque = deque()
        chunks = _chunks(paths)
        window = jobs * WINDOW_PER_JOB
        for chunk in chunks:
            pending.append(pool.apply_async(_run_chunk, (chunk,)))
            if len(pending) >= window:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def _here(task: _Task, paths: Sequence[str]) -> Iterator[FileResult]:
    for path in paths:
        yield _guarded(task, path)


def uses_workers(candidate_files: int, candidate_bytes: int, jobs: int) -> bool:
    """Whether this much parsing is worth starting ``jobs`` worker processes."""
    return (
        jobs > 1 and candidate_files >= POOL_MIN_FILES and candidate_bytes >= POOL_MIN_BYTES
    )


def _pipeline(
    paths: Iterable[str | os.PathLike[str]],
    task: _Task,
    options: TransformOptions,
    selection: Selection,
    execution: Execution,
) -> Iterator[FileResult]:
    files = collect_files(
        list(paths),
        selection.include,
        selection.exclude,
        selection.force_exclude,
        keep_missing=True,  # reported as a failed file, naming it
    )
    if isinstance(task, _MigrateTask) and task.write:
        remove_stale_temp_files(files)
    prefilter = Prefilter.for_names(options.extra_hooks) if execution.prefilter else None
    needed, needed_bytes = _prefilter(files, prefilter)
    candidates = [path for path, flag in zip(files, needed, strict=True) if flag]
    jobs = execution.jobs or os.cpu_count() or 1
    jobs = min(jobs, len(candidates)) if candidates else 1
    if uses_workers(len(candidates), needed_bytes, jobs):
        transformed = _in_workers(task, candidates, jobs)
    else:
        transformed = _here(task, candidates)
    progress = Progress(len(candidates), enabled=execution.progress)
    try:
        for path, flag in zip(files, needed, strict=True):
            if not flag:
                yield FileResult(path, Status.UNCHANGED)
                continue
            result = next(transformed)
            progress.advance()
            if result.status is not Status.UNCHANGED or result.call_sites:
                progress.clear()  # the caller prints something about this file
            yield result
    finally:
        progress.close()
        close = getattr(transformed, "close", None)
        if close is not None:
            close()


def scan(
    paths: Iterable[str | os.PathLike[str]],
    options: TransformOptions,
    selection: Selection = Selection(),
    execution: Execution = Execution(),
) -> Iterator[FileResult]:
    """Scan every source file under ``paths``, in sorted path order."""
    task = _ScanTask(options, execution.prefilter)
    return _pipeline(paths, task, options, selection, execution)


def run(
    paths: Iterable[str | os.PathLike[str]],
    options: TransformOptions,
    write: bool = False,
    selection: Selection = Selection(),
    execution: Execution = Execution(),
) -> Iterator[FileResult]:
    """Transform every source file under ``paths``; write the changed ones when ``write``."""
    task = _MigrateTask(options, write, execution.prefilter)
    return _pipeline(paths, task, options, selection, execution)
