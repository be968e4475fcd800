"""Bad input never loses a byte: ``migrate --write`` over a tree with one troublesome file.

Each case puts a bad (or merely unusual) file beside ``good.py``, a file that needs migrating,
and runs ``migrate --write`` over the folder through the CLI.  For files auxcap cannot
process: the error names the file and the reason, the file's sha256 is unchanged, ``good.py``
is still rewritten, and the exit code is 2.  Unusual but valid files (latin-1 with a coding
cookie, a BOM, CRLF, tabs and form feeds, an empty file, a symlink) are rewritten correctly in
their own conventions, with exit code 0.

Protections that a test would not notice being removed on its own are each shown to matter:
the test runs once more with the protection monkeypatched away and observes the damage.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.callers import engine
from codemods.callers.transform import TransformOptions, transform_source
from codemods.cli.commands import cli
from codemods.sources import fileio

HOOK_CALL = "model.set_dspark_layers_to_capture(args.capture_layers)"
GOOD = f"def main(model, args):\n    {HOOK_CALL}\n".encode()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected(source: bytes, path: str = "x.py") -> bytes:
    result = transform_source(source, path, TransformOptions())
    assert result.rewritten is not None, result.error
    return result.rewritten


@pytest.fixture
def tree(tmp_path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "good.py").write_bytes(GOOD)
    return folder


def migrate(*paths) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["migrate", "--write", *map(str, paths)])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stderr


def assert_good_rewritten(folder: Path) -> None:
    assert (folder / "good.py").read_bytes() == expected(GOOD)


def assert_rejected(code: int, stderr: str, path: Path, reason: str) -> None:
    assert code == 2, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("auxcap: error:")]
    assert any(str(path) in line and reason in line for line in lines), stderr


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if fileio.TEMP_PATTERN.match(p.name)]


# ---- files auxcap refuses ---------------------------------------------------------------


def test_syntax_error(tree):
    bad = tree / "broken.py"
    bad.write_bytes(f"def main(model, args):\n    {HOOK_CALL}\n    return (\n".encode())
    digest = sha(bad)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "syntax error")
    assert sha(bad) == digest
    assert_good_rewritten(tree)


def test_undecodable_bytes(tree):
    bad = tree / "binary.py"
    bad.write_bytes(f"# caf\xe9 \xff\xfe\n{HOOK_CALL}\n".encode("latin-1"))
    digest = sha(bad)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "decode")
    assert sha(bad) == digest
    assert_good_rewritten(tree)


def test_binary_file_naming_a_hook_after_a_stray_hash_byte_is_named_by_scan(tree):
    bad = tree / "blob.py"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe#model.set_eagle3_layers_to_capture(ids)\n")
    result = CliRunner().invoke(cli, ["scan", str(bad)])
    assert_rejected(result.exit_code, result.stderr, bad, "cannot decode the file")
    assert "1 failed" in result.stderr


def test_symlink_loop(tree):
    os.symlink(tree / "loop_b.py", tree / "loop_a.py")
    os.symlink(tree / "loop_a.py", tree / "loop_b.py")
    code, err = migrate(tree)
    assert_rejected(code, err, tree / "loop_a.py", "symlink loop")
    assert_rejected(code, err, tree / "loop_b.py", "symlink loop")
    assert os.readlink(tree / "loop_a.py") == str(tree / "loop_b.py")
    assert_good_rewritten(tree)


def test_unreadable_file(tree, monkeypatch):
    """chmod 000 does not stop root, so the refusal is injected at the one place reads start
    (``fileio._open_for_reading``); ``test_fileio`` also checks a real chmod 000 file read by an
    unprivileged process."""
    bad = tree / "secret.py"
    bad.write_bytes(GOOD)
    bad.chmod(0o000)
    real_open = fileio._open_for_reading

    def open_as_unprivileged(path):
        if os.path.basename(path) == "secret.py":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path)

    monkeypatch.setattr(fileio, "_open_for_reading", open_as_unprivileged)
    digest = sha(bad)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "permission denied")
    assert sha(bad) == digest
    assert_good_rewritten(tree)


def test_read_only_file_with_write(tree):
    """Root may write any file, so auxcap refuses files without a write bit explicitly."""
    bad = tree / "frozen.py"
    bad.write_bytes(GOOD)
    bad.chmod(0o444)
    digest = sha(bad)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "read-only")
    assert sha(bad) == digest
    assert oct(bad.stat().st_mode & 0o777) == oct(0o444)
    assert_good_rewritten(tree)
    assert no_temp_files(tree)


def test_read_only_file_would_be_written_without_the_check(tree, monkeypatch):
    """The protection matters: with the explicit check gone, root overwrites the file."""
    if os.geteuid() != 0:
        pytest.skip("only root writes read-only files regardless of their mode")
    bad = tree / "frozen.py"
    bad.write_bytes(GOOD)
    bad.chmod(0o444)
    monkeypatch.setattr(fileio, "check_writable", lambda snapshot: None)
    code, _ = migrate(tree)
    assert code == 0 and bad.read_bytes() == expected(GOOD)


def test_directory_named_like_a_source_inside_a_tree_is_walked(tree):
    folder = tree / "package.py"
    folder.mkdir()
    (folder / "inner.py").write_bytes(GOOD)
    code, err = migrate(tree)
    assert code == 0, err
    assert (folder / "inner.py").read_bytes() == expected(GOOD)
    assert_good_rewritten(tree)


def test_directory_named_like_a_source_listed_as_a_file(tree, monkeypatch):
    """A path listed as a file that is a directory by the time it is read (a race, or a
    collector bug) is refused by name, and the run goes on."""
    folder = tree / "package.py"
    folder.mkdir()
    listed = [str(folder), str(tree / "good.py")]
    monkeypatch.setattr(engine, "collect_files", lambda paths, *a, **k: listed)
    code, err = migrate(tree)
    assert_rejected(code, err, folder, "directory")
    assert folder.is_dir() and not list(folder.iterdir())
    assert_good_rewritten(tree)


def test_non_existent_path(tree):
    missing = tree / "missing.py"
    code, err = migrate(missing, tree)
    assert_rejected(code, err, missing, "no such file")
    assert not missing.exists()
    assert_good_rewritten(tree)


def test_file_changed_between_read_and_write(tree, monkeypatch):
    bad = tree / "busy.py"
    bad.write_bytes(GOOD)
    theirs = GOOD + b"# an edit made by someone else meanwhile\n"

    def someone_edits(snapshot, temp_path):
        if snapshot.path.endswith("busy.py"):
            Path(snapshot.target).write_bytes(theirs)

    monkeypatch.setattr(fileio, "_before_replace", someone_edits)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "changed by someone else")
    assert bad.read_bytes() == theirs
    assert_good_rewritten(tree)
    assert no_temp_files(tree)


def test_concurrent_edit_would_be_lost_without_the_check(tree, monkeypatch):
    """The protection matters: without the re-check, the other writer's edit is overwritten."""
    bad = tree / "busy.py"
    bad.write_bytes(GOOD)
    monkeypatch.setattr(
        fileio, "_before_replace", lambda snapshot, temp: Path(snapshot.target).write_bytes(b"#\n")
    )
    monkeypatch.setattr(fileio, "check_unchanged", lambda snapshot: None)
    code, _ = migrate(tree)
    assert code == 0 and bad.read_bytes() == expected(GOOD)


def test_file_too_large_to_rewrite(tree):
    bad = tree / "generated.py"
    filler = b"TABLE = [\n" + b"    0x0123456789abcdef,\n" * 230_000 + b"]\n"
    bad.write_bytes(filler + f"def main(model, args):\n    {HOOK_CALL}\n".encode())
    assert bad.stat().st_size > 5_000_000
    digest = sha(bad)
    code, err = migrate(tree)
    assert_rejected(code, err, bad, "too large")
    assert sha(bad) == digest
    assert_good_rewritten(tree)


# ---- unusual files that are processed --------------------------------------------------


def test_large_file_without_hooks_is_skipped_quickly(tree):
    big = tree / "data_table.py"
    big.write_bytes(b"TABLE = [\n" + b"    0x0123456789abcdef,\n" * 230_000 + b"]\n")
    digest = sha(big)
    code, err = migrate(tree)
    assert code == 0, err
    assert sha(big) == digest
    assert_good_rewritten(tree)


def test_latin1_file_with_coding_cookie_is_rewritten_in_its_encoding(tree):
    path = tree / "legacy.py"
    text = (
        "# -*- coding: latin-1 -*-\nGREETING = 'caf\xe9'\n\n"
        f"def main(model, args):\n    {HOOK_CALL}\n"
    )
    path.write_bytes(text.encode("latin-1"))
    code, err = migrate(tree)
    assert code == 0, err
    data = path.read_bytes()
    assert data == expected(text.encode("latin-1"))
    assert b"caf\xe9" in data and "café".encode() not in data
    rewritten = data.decode("latin-1")
    assert "if args.capture_layers:" in rewritten and "list(args.capture_layers)" in rewritten
    compile(data, str(path), "exec")
    assert_good_rewritten(tree)


def test_utf8_bom_is_kept(tree):
    path = tree / "bom.py"
    source = b"\xef\xbb\xbf" + GOOD
    path.write_bytes(source)
    code, err = migrate(tree)
    assert code == 0, err
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and not data.startswith(b"\xef\xbb\xbf" * 2)
    assert data == expected(source)
    assert b"if args.capture_layers:" in data


def test_crlf_line_endings_are_kept_on_inserted_lines(tree):
    path = tree / "windows.py"
    source = GOOD.replace(b"\n", b"\r\n")
    path.write_bytes(source)
    code, err = migrate(tree)
    assert code == 0, err
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > GOOD.count(b"\n")
    assert b"except NotImplementedError as exc:\r\n" in data
    assert data == expected(source)


def test_tabs_and_form_feeds_are_kept(tree):
    path = tree / "tabs.py"
    source = (
        b"import os\n\x0c\n"
        b"def main(model, args):\n"
        b"\tif os.environ.get('CAPTURE'):\n"
        b"\t\tmodel.set_dspark_layers_to_capture(args.capture_layers)\n"
        b"\x0c\n"
        b"def other():\n\treturn 1\n"
    )
    path.write_bytes(source)
    code, err = migrate(tree)
    assert code == 0, err
    data = path.read_bytes()
    assert data.count(b"\x0c") == 2
    assert b"\t\tif args.capture_layers:\n\t\t\ttry:\n" in data
    assert b"    " not in data.split(b"def main")[1].split(b"logger.warning")[0]
    compile(data, str(path), "exec")
    assert data == expected(source)


def test_empty_file_is_left_alone(tree):
    path = tree / "empty.py"
    path.write_bytes(b"")
    code, err = migrate(tree)
    assert code == 0, err
    assert path.read_bytes() == b""
    assert_good_rewritten(tree)


def test_symlink_to_a_file_rewrites_the_target_and_keeps_the_link(tree, tmp_path):
    outside = tmp_path / "shared"
    outside.mkdir()
    target = outside / "real_module.py"
    target.write_bytes(GOOD)
    link = tree / "linked.py"
    os.symlink(target, link)
    code, err = migrate(link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() == expected(GOOD)
    assert no_temp_files(tree) and no_temp_files(outside)


def test_symlink_would_be_replaced_by_a_copy_without_following_it(tree, tmp_path, monkeypatch):
    """The protection matters: replacing the link path itself turns the link into a copy and
    leaves the real file unmigrated."""
    target = tmp_path / "real_module.py"
    target.write_bytes(GOOD)
    link = tree / "linked.py"
    os.symlink(target, link)
    real_read = fileio.read_source

    def read_without_resolving(path):
        snapshot = real_read(path)
        return fileio.SourceSnapshot(**{**snapshot.__dict__, "target": snapshot.path})

    monkeypatch.setattr(fileio, "read_source", read_without_resolving)
    monkeypatch.setattr(fileio, "check_unchanged", lambda snapshot: None)
    code, _ = migrate(link)
    assert code == 0
    assert not link.is_symlink() and target.read_bytes() == GOOD


def test_every_failure_still_exits_2_when_mixed(tree, monkeypatch):
    """Several bad files at once: all are reported, none touched, the good one rewritten."""
    (tree / "broken.py").write_bytes(f"{HOOK_CALL}\n  x = (\n".encode())
    (tree / "frozen.py").write_bytes(GOOD)
    (tree / "frozen.py").chmod(0o444)
    os.symlink(tree / "self_loop.py", tree / "self_loop.py")
    before = {p.name: sha(p) for p in tree.iterdir() if p.is_file() and p.name != "good.py"}
    code, err = migrate(tree)
    assert code == 2
    for name in ("broken.py", "frozen.py", "self_loop.py"):
        assert f"{tree / name}:" in err, err
    after = {p.name: sha(p) for p in tree.iterdir() if p.is_file() and p.name != "good.py"}
    assert after == before
    assert_good_rewritten(tree)
