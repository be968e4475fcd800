"""File collection: .gitignore in a real git work tree, skipped folders, globs, explicit files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from codemods.sources.collect import FileCollectionError, Glob, collect_files


def _touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def _relative(files: list[str], root: Path) -> list[str]:
    return [Path(os.path.relpath(file, root)).as_posix() for file in files]


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / ".gitignore").write_text("generated/\n*_pb2.py\n/local_only.py\n")
    _touch(
        root,
        "pkg/a.py",
        "pkg/b.py",
        "pkg/sub/c.py",
        "generated/g.py",
        "pkg/msg_pb2.py",
        "local_only.py",
        "pkg/local_only.py",
        "untracked.py",
        "myenv/pyvenv.cfg",
        "myenv/lib/site.py",
        "node_modules/x.py",
        "build/lib/y.py",
        "pkg/__pycache__/z.py",
        "README.md",
    )
    _git(root, "add", "pkg/a.py", "pkg/b.py", ".gitignore")
    _git(root, "commit", "-q", "-m", "init")
    return root


def test_git_work_tree_honours_gitignore_and_lists_untracked_files(repo):
    files = collect_files([repo])
    assert _relative(files, repo) == [
        "pkg/a.py",
        "pkg/b.py",
        "pkg/local_only.py",
        "pkg/sub/c.py",
        "untracked.py",
    ]


def test_a_subdirectory_of_a_work_tree_is_listed_relative_to_it(repo):
    files = collect_files([repo / "pkg"])
    assert _relative(files, repo / "pkg") == ["a.py", "b.py", "local_only.py", "sub/c.py"]


def test_outside_git_the_walk_skips_tool_and_environment_folders(tmp_path):
    _touch(
        tmp_path,
        "a.py",
        "stub.pyi",
        "notes.txt",
        "env/pyvenv.cfg",
        "env/lib/x.py",
        ".venv/x.py",
        "venv/x.py",
        ".tox/x.py",
        "build/x.py",
        "node_modules/x.py",
        ".git/hooks/x.py",
        "sub/__pycache__/x.py",
        "sub/deep/b.py",
    )
    assert _relative(collect_files([tmp_path]), tmp_path) == ["a.py", "stub.pyi", "sub/deep/b.py"]


def test_a_directory_git_ignores_is_walked_when_named(repo):
    files = collect_files([repo / "generated"])
    assert _relative(files, repo / "generated") == ["g.py"]


@pytest.mark.parametrize(
    "globs, expected",
    [
        (("sub",), ["a.py", "b.py", "local_only.py"]),
        (("pkg/sub/",), ["a.py", "b.py", "local_only.py", "sub/c.py"]),  # anchored at pkg
        (("/b.py",), ["a.py", "local_only.py", "sub/c.py"]),
        (("*_only.py",), ["a.py", "b.py", "sub/c.py"]),
        (("**/c.py",), ["a.py", "b.py", "local_only.py"]),
        (("s?b/*.py",), ["a.py", "b.py", "local_only.py"]),
        (("[ab].py",), ["local_only.py", "sub/c.py"]),
    ],
)
def test_exclude_globs(repo, globs, expected):
    files = collect_files([repo / "pkg"], exclude=globs)
    assert _relative(files, repo / "pkg") == expected


def test_include_globs_keep_only_matching_files_and_exclusion_wins(repo):
    pkg = repo / "pkg"
    assert _relative(collect_files([pkg], include=["sub/"]), pkg) == ["sub/c.py"]
    assert _relative(collect_files([pkg], include=["*.py"], exclude=["a.py"]), pkg) == [
        "b.py",
        "local_only.py",
        "sub/c.py",
    ]


def test_glob_semantics():
    assert Glob.compile("tests").matches("a/tests/x.py", is_dir=False)
    assert not Glob.compile("tests/").matches("a/tests", is_dir=False)
    assert Glob.compile("tests/").matches("a/tests/x.py", is_dir=False)
    assert Glob.compile("src/**/gen").matches("src/a/b/gen/x.py", is_dir=False)
    assert Glob.compile("src/**/gen").matches("src/gen/x.py", is_dir=False)
    assert not Glob.compile("src/*.py").matches("src/a/b.py", is_dir=False)
    assert Glob.compile("docs/**").matches("docs/a/b.py", is_dir=False)
    assert not Glob.compile("x/*.py").matches("a/x/b.py", is_dir=False)


def test_explicit_files_are_kept_unless_force_exclude(repo, monkeypatch):
    monkeypatch.chdir(repo)
    explicit = ["generated/g.py", "pkg/msg_pb2.py", "myenv/lib/site.py", "build/lib/y.py"]
    assert collect_files(explicit, exclude=["*_pb2.py"]) == sorted(
        explicit, key=lambda p: p.split("/")
    )
    kept = collect_files(explicit, exclude=["*_pb2.py", "generated"], force_exclude=True)
    assert kept == []  # exclude globs, a virtualenv and build/ all apply
    assert collect_files(["pkg/a.py"], exclude=["b.py"], force_exclude=True) == ["pkg/a.py"]


def test_order_is_sorted_and_duplicates_collapse(repo):
    files = collect_files([repo / "pkg" / "b.py", repo / "pkg", repo / "pkg" / "a.py"])
    assert _relative(files, repo) == ["pkg/a.py", "pkg/b.py", "pkg/local_only.py", "pkg/sub/c.py"]


def test_missing_paths_are_a_clear_error(tmp_path):
    with pytest.raises(FileCollectionError, match="nope.py: no such file or directory"):
        collect_files([tmp_path / "nope.py"])
    with pytest.raises(FileCollectionError, match="invalid glob"):
        collect_files([tmp_path], exclude=["/"])


def test_glob_leading_bang_and_hash_are_literal_and_dir_only_needs_a_folder():
    """A glob picks files: ``!x`` and ``#x`` name files called so, not a negation or comment."""
    assert Glob.compile("!x.py").matches("a/!x.py", is_dir=False)
    assert not Glob.compile("!x.py").matches("a/y.py", is_dir=False)
    assert Glob.compile("#gen").matches("#gen/a.py", is_dir=False)
    assert Glob.compile(" build/ ").matches("pkg/build", is_dir=True)
    assert not Glob.compile("build/").matches("pkg/build", is_dir=False)
