"""Nothing unread passes: a folder inside a tree that cannot be listed is named, exit 2.

Tests run as root, where ``chmod 000`` does not stop a listing, so the refusal is injected
where the walk lists a folder (``os.scandir``, which ``os.walk`` calls) and, for git work
trees, by parsing git's own warning.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.sources import collect
from tests.gitrepo import isolate_git, make_repo, repo_state

SOURCE = "def f(model, args):\n    model.set_dspark_layers_to_capture(args.ids)\n"
SAFE = "def f(model):\n    model.set_eagle3_layers_to_capture([1, 2])\n"


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "repo"
    (root / "locked").mkdir(parents=True)
    (root / "ok.py").write_text(SAFE)
    (root / "locked" / "train.py").write_text(SOURCE)  # needs a change, but is never read
    return root


@pytest.fixture
def locked(tree, monkeypatch) -> Path:
    folder = tree / "locked"
    real = os.scandir

    def scandir(path="."):
        if os.path.abspath(os.fspath(path)) == str(folder):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return folder


def invoke(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


@pytest.mark.parametrize(
    "command",
    [
        ["scan"],
        ["scan", "--format", "json"],
        ["migrate"],
        ["migrate", "--check"],
        ["migrate", "--check", "--exit-zero"],
        ["migrate", "--write"],
        ["migrate", "--format", "json"],
    ],
)
def test_unlistable_folder_is_named_and_exits_2(tree, locked, command):
    result = invoke(*command, tree)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("auxcap: error:")]
    assert errors == [f"auxcap: error: {locked}: cannot list directory: permission denied"]
    assert (tree / "ok.py").read_text() == SAFE


def test_without_the_refusal_the_same_check_finds_the_change(tree):
    """The control: the folder's file needs a change, so a silent skip would hide it."""
    result = invoke("migrate", "--check", tree)
    assert result.exit_code == 1, result.output


def test_check_never_says_nothing_to_change_over_an_unread_folder(tree, locked):
    result = invoke("migrate", "--check", tree)
    assert result.exit_code == 2
    assert "1 failed" in result.stderr


def test_scan_json_lists_the_folder_as_failed(tree, locked):
    import json

    result = invoke("scan", "--format", "json", tree)
    document = json.loads(result.stdout)
    failed = [entry for entry in document["files"] if entry["status"] == "failed"]
    assert [entry["path"] for entry in failed] == [str(locked)]
    assert document["summary"]["failed"] == 1


def test_excluded_folder_is_not_an_error(tree, locked):
    result = invoke("migrate", "--check", "--exclude", "locked/", tree)
    assert result.exit_code == 0, result.output


def test_collect_files_records_the_folder(tree, locked):
    unreadable: dict[str, str] = {}
    files = collect.collect_files([tree], unreadable=unreadable)
    assert unreadable == {str(locked): "cannot list directory: permission denied"}
    assert str(locked) in files and str(tree / "ok.py") in files


def test_git_warning_about_an_unreadable_folder_is_parsed():
    stderr = "warning: could not open directory 'pkg/locked/': Permission denied\n"
    assert collect.git_unreadable(stderr) == {
        "pkg/locked": "cannot list directory: permission denied"
    }
    assert collect.git_unreadable("warning: something else\n") == {}


def _git_cannot_open(monkeypatch, folder: str) -> None:
    """git's listing as it is when it cannot open ``folder``: a warning, no files below."""
    real = subprocess.run

    def run(command, *args, **kwargs):
        done = real(command, *args, **kwargs)
        if command[:2] == ["git", "ls-files"]:
            warning = f"warning: could not open directory '{folder}/': Permission denied\n"
            kept = [
                name
                for name in done.stdout.split(b"\0")
                if not name.startswith(folder.encode() + b"/")
            ]
            return subprocess.CompletedProcess(
                done.args, done.returncode, b"\0".join(kept), warning.encode()
            )
        return done

    monkeypatch.setattr(collect.subprocess, "run", run)


def test_git_work_tree_folder_git_cannot_open_exits_2(tree, monkeypatch, tmp_path):
    isolate_git(monkeypatch, tmp_path)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    _git_cannot_open(monkeypatch, "locked")
    result = invoke("migrate", "--check", tree)
    assert result.exit_code == 2, result.output
    assert f"{tree / 'locked'}: cannot list directory: permission denied" in result.stderr


def test_branch_over_a_folder_git_cannot_open_commits_nothing(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    repo = make_repo(tmp_path / "work")
    (repo / "locked").mkdir()
    (repo / "locked" / "train.py").write_text(SOURCE)
    before = repo_state(repo)
    _git_cannot_open(monkeypatch, "locked")
    monkeypatch.chdir(repo)
    result = invoke("migrate", "--branch", "auxcap/fix", "--allow-dirty", ".")
    assert result.exit_code == 2, result.output
    assert "locked: cannot list directory: permission denied" in result.stderr
    assert repo_state(repo) == before


def test_dangling_tracked_symlink_is_named(tree, monkeypatch, tmp_path):
    isolate_git(monkeypatch, tmp_path)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    os.symlink(tree / "gone.py", tree / "link.py")
    subprocess.run(["git", "-C", str(tree), "add", "link.py"], check=True)
    result = invoke("migrate", "--check", tree)
    assert result.exit_code == 2, result.output
    assert f"{tree / 'link.py'}: " in result.stderr


def test_dangling_symlink_outside_git_is_named(tree):
    os.symlink(tree / "gone.py", tree / "link.py")
    result = invoke("migrate", "--check", tree)
    assert result.exit_code == 2, result.output
    assert f"{tree / 'link.py'}: " in result.stderr
