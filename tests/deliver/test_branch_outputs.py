"""The PR description and the patch file that a ``--branch`` run writes into the work tree
are auxcap's own output: they never make a later run refuse the tree as dirty."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from tests.gitrepo import git, isolate_git, make_repo
from tests.upstream.test_upstream_rerun import family_checkout


def auxcap(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def undo(repo, branch):
    git(repo, "switch", "-q", "main")
    git(repo, "branch", "-q", "-D", branch)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    return make_repo(tmp_path / "repo")


def test_migrate_runs_again_after_undo_with_the_pr_body_left_in_the_tree(repo, monkeypatch):
    monkeypatch.chdir(repo)
    first = auxcap("migrate", ".", "--branch", "auxcap/guard", "--pr-body", "PR.md")
    assert first.exit_code == 0, first.output
    undo(repo, "auxcap/guard")
    assert git(repo, "status", "--porcelain").strip() == "?? PR.md"
    (repo / "PR.md").write_text("stale\n")
    again = auxcap("migrate", ".", "--branch", "auxcap/guard", "--pr-body", "PR.md")
    assert again.exit_code == 0, again.output
    assert (repo / "PR.md").read_text().startswith("# Guard aux hidden-state capture calls")
    assert "PR.md" not in git(repo, "show", "--name-only", "--format=", "auxcap/guard")


def test_other_untracked_files_still_make_the_tree_dirty(repo, monkeypatch):
    monkeypatch.chdir(repo)
    (repo / "PR.md").write_text("old description\n")
    (repo / "notes.txt").write_text("mine\n")
    done = auxcap("migrate", ".", "--branch", "auxcap/guard", "--pr-body", "PR.md")
    assert done.exit_code == 2
    assert "untracked files (notes.txt)" in done.output
    assert (repo / "PR.md").read_text() == "old description\n"


def test_a_tracked_pr_body_with_changes_still_makes_the_tree_dirty(repo, monkeypatch):
    monkeypatch.chdir(repo)
    (repo / "PR.md").write_text("tracked\n")
    git(repo, "add", "PR.md")
    git(repo, "commit", "-q", "-m", "PR template")
    (repo / "PR.md").write_text("edited\n")
    done = auxcap("migrate", ".", "--branch", "auxcap/guard", "--pr-body", "PR.md")
    assert done.exit_code == 2
    assert "uncommitted changes or untracked files (PR.md)" in done.output
    assert (repo / "PR.md").read_text() == "edited\n"


def test_upstream_patch_file_and_pr_body_inside_the_tree(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "sglang")
    monkeypatch.chdir(root)
    args = ("upstream-patch", ".", "--branch", "pp/capture", "-o", "pp.patch", "--pr-body", "PR.md")
    first = auxcap(*args)
    assert first.exit_code == 0, first.output
    assert (root / "pp.patch").read_text().startswith("diff --git ")
    undo(root, "pp/capture")
    again = auxcap(*args)
    assert again.exit_code == 0, again.output
    committed = git(root, "show", "--name-only", "--format=", "pp/capture").split()
    assert "pp.patch" not in committed and "PR.md" not in committed
    assert "sglang/srt/layers/aux_hidden_states.py" in committed
