"""Run the per-file transform over many paths.

``run(paths, options, write)`` (migrate) and ``scan(paths, options)`` go through the same
pipeline and yield one :class:`~codemods.callers.records.FileResult` per collected file, in sorted path
order:

1. **collect** the files (:mod:`codemods.sources.collect`: ``.gitignore``, skipped folders, globs;
   each file once, whatever symlinks lead to it);
2. **prefilter** them in this process, reading each file once (:mod:`codemods.sources.prefilter`): a
   file that cannot hold a call site yields an ``UNCHANGED`` result at once and its bytes are
   dropped; the snapshot of a file that needs parsing is handed to the transform (up to
   ``KEEP_MAX_BYTES`` in all), so it is not opened again.  LibCST is never imported when no
   file needs it;
3. **transform** the remaining candidates (``transform_source`` or ``scan_source``), in worker
   processes when there is enough work to pay for them (``jobs``, and at least
   ``POOL_MIN_FILES`` candidates with ``POOL_MIN_BYTES`` of source between them), else here.
   Workers get the snapshots with their work (or read the files the prefilter did not keep);
   at most ``WINDOW_PER_JOB`` chunks per worker are in flight,
   so memory stays bounded however many files there are, and results come back in order;
4. with ``write=True`` a changed file is written atomically, keeping mode and owner, and only
   if nobody changed it since it was read; temporary files left by a killed run are removed
   first.

All reads and writes go through :mod:`codemods.sources.fileio`: only regular files are read
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

from codemods.callers.records import FileResult, Status
from codemods.cli.progress import Progress
from codemods.sources import fileio
from codemods.sources.collect import collect_files
from codemods.sources.prefilter import Prefilter

if TYPE_CHECKING:  # the transform imports LibCST: only loaded when a file needs parsing
    from codemods.callers.transform import TransformOptions

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
#: Source kept in memory between the prefilter and the transform, at most; files beyond it
#: are read again by the transform.
KEEP_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Selection:
    """Which files a run looks at (see :mod:`codemods.sources.collect`)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    force_exclude: bool = False
    follow_links: bool = False  # symlinks leading out of the paths given, or to unselected files


@dataclass(frozen=True)
class Execution:
    """How a run is carried out: never changes its results."""

    jobs: int | None = None  # worker processes; None: one per CPU
    prefilter: bool = True  # False: parse every file (for checks and benchmarks)
    progress: bool = False  # a progress bar on stderr (drawn only on a terminal)


def _mentions_hooks(data: bytes, options: TransformOptions) -> bool:
    return any(name.encode() in data for name in options.hooks.names)


def _snapshot(
    path: str, options: TransformOptions, snapshot: fileio.SourceSnapshot | None = None
) -> fileio.SourceSnapshot | FileResult:
    """The file as read (``snapshot`` when the caller has read it already), or a ``FAILED``
    result saying why it cannot be processed."""
    if snapshot is None:
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


def scan_file(
    path: str,
    options: TransformOptions,
    prefilter: bool = True,
    snapshot: fileio.SourceSnapshot | None = None,
) -> FileResult:
    """Discover the call sites of one file; never writes.  A ``snapshot`` passed in is one the
    engine read and prefiltered already: it is neither read nor prefiltered again."""
    from codemods.callers.transform import scan_source

    read = _snapshot(path, options, snapshot)
    if isinstance(read, FileResult):
        return read
    prefilter = prefilter and snapshot is None
    return _slim(scan_source(read.data, path, options, prefilter=prefilter))


def migrate_file(
    path: str,
    options: TransformOptions,
    write: bool,
    prefilter: bool = True,
    snapshot: fileio.SourceSnapshot | None = None,
) -> FileResult:
    """Transform one file; write it back when ``write`` and it changed (``snapshot`` as for
    :func:`scan_file`)."""
    from codemods.callers.transform import transform_source

    prefilter = prefilter and snapshot is None
    read = _snapshot(path, options, snapshot)
    if isinstance(read, FileResult):
        return read
    result = transform_source(read.data, path, options, prefilter=prefilter)
    if write and result.status is Status.CHANGED and result.rewritten is not None:
        try:
            fileio.write_atomic(read, result.rewritten)
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
            original=read.data,
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
#: A file to transform: its path, and its snapshot when the prefilter kept it.
_Item = tuple[str, "fileio.SourceSnapshot | None"]
_Task = Callable[[_Item], FileResult]
_worker_task: _Task | None = None


def _init_worker(task: _Task) -> None:
    global _worker_task
    _worker_task = task


def _run_chunk(items: Sequence[_Item]) -> list[FileResult]:
    assert _worker_task is not None
    return [_guarded(_worker_task, item) for item in items]


def _guarded(task: _Task, item: _Item) -> FileResult:
    try:
        return task(item)
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        message = f"internal error: {type(error).__name__}: {error}"
        return FileResult(item[0], Status.FAILED, error=message)


@dataclass
class _ScanTask:
    options: TransformOptions
    prefilter: bool

    def __call__(self, item: _Item) -> FileResult:
        return scan_file(item[0], self.options, self.prefilter, item[1])


@dataclass
class _MigrateTask:
    options: TransformOptions
    write: bool
    prefilter: bool

    def __call__(self, item: _Item) -> FileResult:
        return migrate_file(item[0], self.options, self.write, self.prefilter, item[1])


def _prefilter(
    files: Sequence[str], prefilter: Prefilter | None
) -> tuple[list[bool], int, dict[str, fileio.SourceSnapshot]]:
    """Which files need a parse, their total size, and the snapshots of those files kept for
    the transform (up to ``KEEP_MAX_BYTES``: a file needing a parse is then read only once);
    the source of a file that needs no parse is not kept."""
    if prefilter is None:
        return [True] * len(files), sum(_size(path) for path in files), {}
    flags = []
    total = 0
    kept: dict[str, fileio.SourceSnapshot] = {}
    for path in files:
        try:
            data, info = fileio.read_regular(path)
        except fileio.SourceFileError:
            flags.append(True)  # the transform reports why it cannot be read
            continue
        needed = prefilter.needs_parse(data)
        flags.append(needed)
        if needed:
            if total + len(data) <= KEEP_MAX_BYTES:
                with fileio.prefetched(path, data, info):
                    kept[path] = fileio.read_source(path)
            total += len(data)
    return flags, total, kept


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _chunks(items: Sequence[_Item]) -> Iterator[list[_Item]]:
    chunk: list[_Item] = []
    size = 0
    for item in items:
        chunk.append(item)
        size += item[1].size if item[1] is not None else _size(item[0])
        if len(chunk) >= CHUNK_MAX_FILES or size >= CHUNK_MAX_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _pool_context():
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _in_workers(task: _Task, items: Sequence[_Item], jobs: int) -> Iterator[FileResult]:
    """``task`` over ``items`` in ``jobs`` processes, results in order, bounded in flight."""
    # Loaded once here and inherited by forked workers, instead of once per worker.
    import codemods.callers.transform  # noqa: F401

    if isinstance(task, _MigrateTask):
        import codemods.callers.rewrite.apply  # noqa: F401

    context = _pool_context()
    pool = context.Pool(jobs, initializer=_init_worker, initargs=(task,))
    try:
        pending: deque = deque()
        chunks = _chunks(items)
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


def _here(task: _Task, items: Sequence[_Item]) -> Iterator[FileResult]:
    for item in items:
        yield _guarded(task, item)


def uses_workers(candidate_files: int, candidate_bytes: int, jobs: int) -> bool:
    """Whether this much parsing is worth starting ``jobs`` worker processes."""
    return jobs > 1 and candidate_files >= POOL_MIN_FILES and candidate_bytes >= POOL_MIN_BYTES


def _pipeline(
    paths: Iterable[str | os.PathLike[str]],
    task: _Task,
    options: TransformOptions,
    selection: Selection,
    execution: Execution,
    links: dict[str, str] | None,
) -> Iterator[FileResult]:
    unreadable: dict[str, str] = {}
    listed = collect_files(
        list(paths),
        selection.include,
        selection.exclude,
        selection.force_exclude,
        keep_missing=True,  # reported as a failed file, naming it
        unreadable=unreadable,  # folders that could not be listed: failed, named
        follow_links=selection.follow_links,
        links=links,  # symlinks that are not files of the run, and why
    )
    files = [path for path in listed if path not in unreadable]
    if isinstance(task, _MigrateTask) and task.write:
        remove_stale_temp_files(files)
    prefilter = Prefilter.for_names(options.extra_hooks) if execution.prefilter else None
    needed, needed_bytes, kept = _prefilter(files, prefilter)
    candidates = [
        (path, kept.pop(path, None)) for path, flag in zip(files, needed, strict=True) if flag
    ]
    jobs = execution.jobs or os.cpu_count() or 1
    jobs = min(jobs, len(candidates)) if candidates else 1
    if uses_workers(len(candidates), needed_bytes, jobs):
        transformed = _in_workers(task, candidates, jobs)
    else:
        transformed = _here(task, candidates)
    progress = Progress(len(candidates), enabled=execution.progress)
    try:
        flags = dict(zip(files, needed, strict=True))
        for path in listed:
            if path in unreadable:
                yield FileResult(path, Status.FAILED, error=unreadable[path])
                continue
            if not flags[path]:
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
    links: dict[str, str] | None = None,
) -> Iterator[FileResult]:
    """Scan every source file under ``paths``, in sorted path order; ``links`` is filled
    (once the first result is asked for) with the symlinks that are not files of the run:
    path -> what was done with it (:func:`codemods.sources.collect.collect_files`)."""
    task = _ScanTask(options, execution.prefilter)
    return _pipeline(paths, task, options, selection, execution, links)


def run(
    paths: Iterable[str | os.PathLike[str]],
    options: TransformOptions,
    write: bool = False,
    selection: Selection = Selection(),
    execution: Execution = Execution(),
    links: dict[str, str] | None = None,
) -> Iterator[FileResult]:
    """Transform every source file under ``paths``; write the changed ones when ``write``
    (``links`` as for :func:`scan`)."""
    task = _MigrateTask(options, write, execution.prefilter)
    return _pipeline(paths, task, options, selection, execution, links)
