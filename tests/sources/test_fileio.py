"""Unit tests of safe reads and atomic writes (``codemods.sources.fileio``)."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
import sys
import time

import pytest

from codemods.sources import fileio
from codemods.sources.fileio import (
    SourceFileError,
    read_source,
    remove_stale_temp_files,
    write_atomic,
)


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def make(tmp_path, name="a.py", data=b"x = 1\n", mode=0o644):
    path = tmp_path / name
    path.write_bytes(data)
    path.chmod(mode)
    return path


def leftovers(directory) -> list[str]:
    return [name for name in os.listdir(directory) if fileio.TEMP_PATTERN.match(name)]


# ---- reads -------------------------------------------------------------------------------


def test_reads_a_regular_file_and_records_identity(tmp_path):
    path = make(tmp_path, data=b"y = 2\n")
    snap = read_source(path)
    assert snap.data == b"y = 2\n"
    assert snap.size == 6
    assert snap.sha256 == hashlib.sha256(b"y = 2\n").hexdigest()
    assert snap.target == os.path.realpath(path)
    assert snap.mtime_ns == os.stat(path).st_mtime_ns


def test_missing_path_is_named_with_reason(tmp_path):
    with pytest.raises(SourceFileError) as info:
        read_source(tmp_path / "nope.py")
    assert "nope.py" in str(info.value) and "no such file" in str(info.value)


def test_directory_named_like_a_source_is_refused(tmp_path):
    (tmp_path / "pkg.py").mkdir()
    with pytest.raises(SourceFileError) as info:
        read_source(tmp_path / "pkg.py")
    assert "pkg.py" in str(info.value) and "directory" in str(info.value)


def test_symlink_loop_is_refused(tmp_path):
    os.symlink(tmp_path / "b.py", tmp_path / "a.py")
    os.symlink(tmp_path / "a.py", tmp_path / "b.py")
    with pytest.raises(SourceFileError) as info:
        read_source(tmp_path / "a.py")
    assert "a.py" in str(info.value) and "symlink loop" in str(info.value)


def test_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe.py")
    with pytest.raises(SourceFileError) as info:
        read_source(tmp_path / "pipe.py")
    assert "FIFO" in str(info.value)


def test_unreadable_file_is_reported(tmp_path, monkeypatch):
    """Root reads any file regardless of mode, so the refusal is injected at the read boundary."""
    path = make(tmp_path)

    def denied(_path):
        raise PermissionError(errno.EACCES, "Permission denied", _path)

    monkeypatch.setattr(fileio, "_open_for_reading", denied)
    with pytest.raises(SourceFileError) as info:
        read_source(path)
    assert "a.py" in str(info.value) and "permission denied" in str(info.value)


@pytest.mark.skipif(
    not hasattr(os, "setuid") or os.geteuid() != 0, reason="needs root to drop to nobody"
)
def test_unreadable_file_really_unreadable_for_an_unprivileged_user(tmp_path):
    """A real chmod 000 file, read by a child process that dropped root privileges."""
    tmp_path.chmod(0o755)
    path = make(tmp_path, mode=0o000)
    code = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from codemods.sources.fileio import read_source, SourceFileError\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "try:\n    read_source(sys.argv[1])\n"
        "except SourceFileError as exc:\n    print(exc)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(fileio.__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), root], capture_output=True, text=True, timeout=60
    )
    assert "permission denied" in out.stdout, out.stderr


# ---- symlinks ----------------------------------------------------------------------------


def test_symlink_target_rewritten_in_place_link_kept(tmp_path):
    real = make(tmp_path, "real.py", b"old\n")
    link = tmp_path / "link.py"
    os.symlink("real.py", link)
    snap = read_source(link)
    assert snap.target == str(real)
    write_atomic(snap, b"new\n")
    assert os.path.islink(link) and os.readlink(link) == "real.py"
    assert real.read_bytes() == b"new\n"
    assert leftovers(tmp_path) == []


# ---- writes ------------------------------------------------------------------------------


def test_write_replaces_content_and_keeps_mode(tmp_path):
    path = make(tmp_path, mode=0o751)
    write_atomic(read_source(path), b"x = 2\n")
    assert path.read_bytes() == b"x = 2\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o751
    assert leftovers(tmp_path) == []


def test_write_keeps_owner_where_possible(tmp_path):
    path = make(tmp_path)
    if os.geteuid() == 0:
        os.chown(path, 4321, 4321)
    before = os.stat(path)
    write_atomic(read_source(path), b"x = 3\n")
    after = os.stat(path)
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


def test_write_goes_through_os_replace(tmp_path, monkeypatch):
    """The target is never opened for writing: new bytes arrive only by a rename."""
    path = make(tmp_path)
    calls = []
    real_replace = os.replace

    def spy(src, dst):
        calls.append((src, dst))
        assert open(src, "rb").read() == b"x = 9\n"  # complete before the rename
        return real_replace(src, dst)

    monkeypatch.setattr(fileio.os, "replace", spy)
    write_atomic(read_source(path), b"x = 9\n")
    ((src, dst),) = calls
    assert dst == str(path)
    assert os.path.dirname(src) == str(tmp_path)
    assert not src.endswith(".py") and fileio.TEMP_PATTERN.match(os.path.basename(src))


def test_read_only_file_is_refused_even_for_root(tmp_path):
    path = make(tmp_path, mode=0o444)
    digest = sha(path)
    with pytest.raises(SourceFileError) as info:
        write_atomic(read_source(path), b"x = 2\n")
    assert "a.py" in str(info.value) and "read-only" in str(info.value)
    assert sha(path) == digest and leftovers(tmp_path) == []


def test_read_only_protection_is_what_stops_the_write(tmp_path, monkeypatch):
    """With the explicit check removed, root overwrites a read-only file: the check matters."""
    path = make(tmp_path, mode=0o444)
    monkeypatch.setattr(fileio, "check_writable", lambda snapshot: None)
    if os.geteuid() != 0:
        pytest.skip("only root bypasses file modes")
    write_atomic(read_source(path), b"x = 2\n")
    assert path.read_bytes() == b"x = 2\n"


def test_concurrent_change_is_detected_and_file_kept(tmp_path, monkeypatch):
    path = make(tmp_path, data=b"x = 1\n")
    snap = read_source(path)

    def someone_edits(snapshot, temp_path):
        path.write_bytes(b"x = 100\n")

    monkeypatch.setattr(fileio, "_before_replace", someone_edits)
    with pytest.raises(SourceFileError) as info:
        write_atomic(snap, b"x = 2\n")
    assert "a.py" in str(info.value) and "changed" in str(info.value)
    assert path.read_bytes() == b"x = 100\n"
    assert leftovers(tmp_path) == []


def test_same_size_change_with_restored_mtime_is_detected_by_hash(tmp_path, monkeypatch):
    path = make(tmp_path, data=b"x = 1\n")
    snap = read_source(path)

    def sneaky_edit(snapshot, temp_path):
        path.write_bytes(b"x = 7\n")
        os.utime(path, ns=(snapshot.mtime_ns, snapshot.mtime_ns))

    monkeypatch.setattr(fileio, "_before_replace", sneaky_edit)
    with pytest.raises(SourceFileError):
        write_atomic(snap, b"x = 2\n")
    assert path.read_bytes() == b"x = 7\n"


def test_change_detection_is_what_protects(tmp_path, monkeypatch):
    """Without the check the other writer's edit would be lost: the check matters."""
    path = make(tmp_path, data=b"x = 1\n")
    snap = read_source(path)
    monkeypatch.setattr(fileio, "_before_replace", lambda s, t: path.write_bytes(b"x = 100\n"))
    monkeypatch.setattr(fileio, "check_unchanged", lambda snapshot: None)
    write_atomic(snap, b"x = 2\n")
    assert path.read_bytes() == b"x = 2\n"  # the concurrent edit is lost


def test_deleted_file_between_read_and_write_is_reported(tmp_path, monkeypatch):
    path = make(tmp_path)
    snap = read_source(path)
    monkeypatch.setattr(fileio, "_before_replace", lambda s, t: path.unlink())
    with pytest.raises(SourceFileError) as info:
        write_atomic(snap, b"x = 2\n")
    assert "changed since it was read" in str(info.value)
    assert not path.exists() and leftovers(tmp_path) == []


def test_failure_while_writing_temp_leaves_target_and_no_temp(tmp_path, monkeypatch):
    path = make(tmp_path)
    digest = sha(path)

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fsync", disk_full)
    with pytest.raises(OSError):
        write_atomic(read_source(path), b"x = 2\n")
    assert sha(path) == digest and leftovers(tmp_path) == []


def test_unwritable_directory_is_reported(tmp_path, monkeypatch):
    path = make(tmp_path)

    def denied(target):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(fileio, "_temp_path", denied)
    with pytest.raises(SourceFileError) as info:
        write_atomic(read_source(path), b"x = 2\n")
    assert "temporary file" in str(info.value) and "permission denied" in str(info.value)


# ---- stale temporary files ---------------------------------------------------------------


def test_stale_temp_files_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".a.py.auxcap-{dead.pid}-abc123.tmp"
    stale.write_bytes(b"partial")
    live = tmp_path / f".a.py.auxcap-{os.getpid()}-def456.tmp"
    live.write_bytes(b"in progress")
    source = make(tmp_path, "b.py")
    removed = remove_stale_temp_files(tmp_path)
    assert removed == [str(stale)]
    assert live.exists() and source.exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")
def test_stale_temp_files_of_reused_pids_and_zombies_are_removed(tmp_path):
    """A pid in a temp name may belong to another process by now (pids are reused), or to
    a killed writer nobody reaped: neither is the writer, so the file is stale."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        written_before = tmp_path / f".a.py.auxcap-{sleeper.pid}-abc123.tmp"
        written_before.write_bytes(b"partial")
        an_hour_ago = written_before.stat().st_mtime - 3600
        os.utime(written_before, (an_hour_ago, an_hour_ago))
        written_after = tmp_path / f".b.py.auxcap-{sleeper.pid}-def456.tmp"
        written_after.write_bytes(b"in progress")
        of_zombie = tmp_path / f".c.py.auxcap-{zombie.pid}-0a1b2c.tmp"
        of_zombie.write_bytes(b"partial")
        deadline = time.monotonic() + 30
        while (fileio._process_started(zombie.pid) or ("?",))[0] != "Z":  # exited, unreaped
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        removed = remove_stale_temp_files(tmp_path)
        assert sorted(removed) == sorted([str(written_before), str(of_zombie)])
        assert written_after.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        zombie.wait()


def test_temp_names_never_look_like_sources():
    assert not fileio.TEMP_PATTERN.match("a.py")
    assert not fileio.TEMP_PATTERN.match(".a.py.auxcap-12-ab.py")
    assert fileio.TEMP_PATTERN.match(".a.py.auxcap-12-ab.tmp")


def test_write_output_atomic_creates_and_replaces_keeping_mode(tmp_path):
    from codemods.sources.fileio import write_output_atomic

    out = tmp_path / "kimi.patch"
    write_output_atomic(out, b"first\n")
    assert out.read_bytes() == b"first\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    out.chmod(0o600)
    write_output_atomic(out, b"second\n")
    assert out.read_bytes() == b"second\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kimi.patch"]
