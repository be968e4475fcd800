"""Safe reads and atomic writes of source files.

Reading: only regular files are read.  A symlink to a file is followed; the write later goes
to the link's *target*, in place, so the link itself stays a link.  Anything else (a symlink
loop, a directory called ``x.py``, a FIFO, a missing or unreadable path) raises
:class:`SourceFileError` naming the file and the reason.

Writing: the new bytes go to a temporary file in the target's own directory, are flushed and
fsynced, get the target's mode bits (and owner, where allowed), and only then replace the
target with :func:`os.replace`, which is atomic on POSIX.  A process killed at any moment
therefore leaves either the old bytes or the new bytes, never a mix.  Temporary files are
named ``.<name>.auxcap-<pid>-<random>.tmp``: they never end in ``.py``, and
:func:`remove_stale_temp_files` deletes those whose writing process is gone.

Before replacing, the target is checked again: when its size, modification time or content
hash differ from what was read, someone else changed it meanwhile and the write is refused.
A file without any write permission bit is refused too, also for root (who could otherwise
write it regardless of its mode).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: Temporary files: ``.<target name>.auxcap-<pid>-<random>.tmp`` in the target's directory.
TEMP_PATTERN = re.compile(r"^\..+\.auxcap-(?P<pid>\d+)-[0-9a-z]+\.tmp$")

_READ_CHUNK = 1 << 20


class SourceFileError(Exception):
    """A file that cannot be read or written safely.  ``str()`` names the file and why."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


@dataclass(frozen=True)
class SourceSnapshot:
    """What was read from one file, and enough about it to notice a later change."""

    path: str  # the path as given (may be a symlink)
    target: str  # the regular file actually read and later replaced
    data: bytes = field(repr=False)
    size: int
    mtime_ns: int
    mode: int  # full st_mode of the target
    uid: int
    gid: int
    sha256: str


def _describe_os_error(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EISDIR:
        return "is a directory, not a file"
    return exc.strerror or type(exc).__name__


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _open_for_reading(path: str) -> int:
    """Open ``path`` read-only without blocking on FIFOs.  The one place reads start."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


#: Bytes already read, by path, handed to the next read of that path (see :func:`prefetched`).
_prefetched: dict[str, tuple[bytes, os.stat_result]] = {}


@contextmanager
def prefetched(path: str, data: bytes, info: os.stat_result) -> Iterator[None]:
    """Within the block, the next read of ``path`` returns ``data`` (and ``info``) from the
    read that just happened instead of opening the file again: the engine's prefilter reads
    every file once and turns the few that need parsing into snapshots this way."""
    _prefetched[path] = (data, info)
    try:
        yield
    finally:
        _prefetched.pop(path, None)


def read_regular(path: str | os.PathLike) -> tuple[bytes, os.stat_result]:
    """The bytes of one regular file (following symlinks) and its ``fstat``, from one open."""
    return _read_regular(os.fspath(path))


def _read_regular(path: str) -> tuple[bytes, os.stat_result]:
    handed = _prefetched.pop(path, None)
    if handed is not None:
        return handed
    try:
        fd = _open_for_reading(path)
    except OSError as exc:
        raise SourceFileError(path, _describe_os_error(exc)) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SourceFileError(path, f"{_kind(info.st_mode)}, not a regular file")
        try:
            return _read_all(fd), info
        except OSError as exc:
            raise SourceFileError(path, f"read failed: {_describe_os_error(exc)}") from exc
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike) -> bytes:
    """The bytes of one regular file (following symlinks), for a quick look; no snapshot."""
    return _read_regular(os.fspath(path))[0]


def read_source(path: str | os.PathLike) -> SourceSnapshot:
    """Read one regular file (following symlinks); raise :class:`SourceFileError` otherwise."""
    path = os.fspath(path)
    data, info = _read_regular(path)
    return SourceSnapshot(
        path=path,
        target=os.path.realpath(path),
        data=data,
        size=info.st_size,
        mtime_ns=info.st_mtime_ns,
        mode=info.st_mode,
        uid=info.st_uid,
        gid=info.st_gid,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def check_writable(snapshot: SourceSnapshot) -> None:
    """Refuse files nobody may write: no write bit at all, or not writable for this user."""
    if not snapshot.mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise SourceFileError(
            snapshot.path, "read-only file (no write permission bit); not written"
        )
    if not os.access(snapshot.target, os.W_OK):
        raise SourceFileError(snapshot.path, "permission denied for writing; not written")


def check_unchanged(snapshot: SourceSnapshot) -> None:
    """Raise when the target no longer holds exactly what ``snapshot`` read."""
    try:
        current = read_source(snapshot.target)
    except SourceFileError as exc:
        raise SourceFileError(
            snapshot.path, f"changed since it was read ({exc.reason}); not written"
        ) from exc
    if (current.size, current.mtime_ns, current.sha256) != (
        snapshot.size,
        snapshot.mtime_ns,
        snapshot.sha256,
    ):
        raise SourceFileError(
            snapshot.path, "changed by someone else since it was read; not written"
        )


def _temp_path(target: str) -> tuple[int, str]:
    directory, name = os.path.split(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        token = os.urandom(6).hex()
        candidate = os.path.join(directory, f".{name}.auxcap-{os.getpid()}-{token}.tmp")
        try:
            return os.open(candidate, flags, 0o600), candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", target)


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _before_replace(snapshot: SourceSnapshot, temp_path: str) -> None:
    """Called after the temporary file is complete, just before the change check.

    Does nothing; it marks the moment between writing and replacing (tests hook it).
    """


def write_atomic(snapshot: SourceSnapshot, data: bytes) -> None:
    """Replace ``snapshot.target`` with ``data`` atomically, keeping its mode and owner.

    Raises :class:`SourceFileError` (the file untouched) when the file is read-only, changed
    since ``snapshot`` was taken, or the temporary file cannot be written.
    """
    check_writable(snapshot)
    target = snapshot.target
    try:
        fd, temp_path = _temp_path(target)
    except OSError as exc:
        raise SourceFileError(
            snapshot.path, f"cannot create a temporary file beside it: {_describe_os_error(exc)}"
        ) from exc
    try:
        _fill(fd, data, stat.S_IMODE(snapshot.mode), owner=(snapshot.uid, snapshot.gid))
        _before_replace(snapshot, temp_path)
        check_unchanged(snapshot)
        try:
            os.replace(temp_path, target)
        except OSError as exc:
            raise SourceFileError(
                snapshot.path, f"cannot replace the file: {_describe_os_error(exc)}"
            ) from exc
    except BaseException:
        _discard(temp_path)
        raise
    _fsync_directory(os.path.dirname(target) or ".")


def temp_stream(data: bytes):
    """An unnamed temporary file holding ``data``, positioned at its start (for a
    subprocess's standard input)."""
    handle = tempfile.TemporaryFile()
    handle.write(data)
    handle.seek(0)
    return handle


def write_output_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Create or replace an output file (a patch, a PR description) atomically.

    Unlike :func:`write_atomic` there is no source snapshot to compare with: the file is
    auxcap's own output.  A new file gets mode 0644; an existing one keeps its mode.
    """
    target = os.path.realpath(os.fspath(path))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o644
    fd, temp_path = _temp_path(target)
    try:
        _fill(fd, data, mode)
        os.replace(temp_path, target)
    except BaseException:
        _discard(temp_path)
        raise
    _fsync_directory(os.path.dirname(target) or ".")


def _fill(fd: int, data: bytes, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Write all of ``data`` to the temporary file ``fd``, sync it, give it ``mode`` (and
    ``owner`` where permitted), and close it."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.fchmod(fd, mode)
        if owner is not None:
            try:
                os.fchown(fd, *owner)
            except OSError:
                pass  # not permitted for non-root users: the file keeps the writer's owner
    finally:
        os.close(fd)


def _discard(temp_path: str) -> None:
    try:
        os.unlink(temp_path)
    except FileNotFoundError:
        pass


def _process_started(pid: int) -> tuple[str, float] | None:
    """``(state, start time)`` of a running process from ``/proc`` (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(float(line.split()[1]) for line in handle if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def _writer_alive(pid: int, written_at: float) -> bool:
    """Whether the process that wrote a temporary file (last modified at ``written_at``)
    still runs.  Process ids are reused and a killed process may stay a zombie, so where
    ``/proc`` tells, a zombie or a process started after the write is not the writer."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _process_started(pid)
    if started is None:
        return True
    state, start = started
    # ``btime`` has whole seconds: a process started within a second of the write counts.
    return state != "Z" and start <= written_at + 1.0


def remove_stale_temp_files(directory: str | os.PathLike) -> list[str]:
    """Delete temporary files left in ``directory`` by auxcap processes that no longer run."""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = TEMP_PATTERN.match(name)
        if not match:
            continue
        path = os.path.join(directory, name)
        try:
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and not _writer_alive(
                int(match.group("pid")), info.st_mtime
            ):
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue
    return removed
