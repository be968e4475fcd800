"""``auxcap migrate --branch`` end to end: the real engine, real git, the click CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from tests.gitrepo import IDENTITY, assert_same_state, git, isolate_git, repo_state

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BRANCH = "auxcap/guard-capture"
UNSAFE = """import logging

logger = logging.getLogger(__name__)


def configure(model, layer_ids=None):
    model.set_dspark_layers_to_capture(layer_ids)
"""
SAFE = "def helper(model):\n    return model\n"


def make_app_repo(path: Path, branch: str = "main") -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    (path / "app").mkdir()
    (path / "app" / "spec.py").write_text(UNSAFE)
    (path / "app" / "util.py").write_text(SAFE)
    (path / "NOTES.md").write_text("notes\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "init", env=IDENTITY)
    return path


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    repo = make_app_repo(tmp_path / "demo")
    monkeypatch.chdir(repo)
    return repo


def auxcap(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_migrate_branch_commits_the_rewrite_and_writes_the_pr_body(repo):
    result = auxcap("migrate", ".", "--branch", BRANCH, "--pr-body", "PR.md")
    assert result.exit_code == 0, result.output
    assert f"git push -u origin {BRANCH}" in result.output
    assert git(repo, "symbolic-ref", "--short", "HEAD").strip() == BRANCH
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["app/spec.py"]
    assert "if layer_ids" in git(repo, "show", "HEAD:app/spec.py")
    message = git(repo, "log", "-1", "--format=%B")
    assert message.startswith("Guard aux hidden-state capture calls (1 call site in 1 file)\n")
    assert "\n  app/spec.py:7 set_dspark_layers_to_capture is called only when" in message
    body = (repo / "PR.md").read_text()
    assert "- `app/spec.py:7`: `set_dspark_layers_to_capture` is called only when" in body
    assert "Idempotent" in body and "git revert" in body
    # Only PR.md (written after the commit) is new; nothing else changed.
    assert git(repo, "status", "--porcelain", "-uall") == "?? PR.md\n"
    assert (repo / "app" / "util.py").read_text() == SAFE


def test_migrate_branch_then_check_finds_nothing_more(repo):
    assert auxcap("migrate", ".", "--branch", BRANCH).exit_code == 0
    again = auxcap("migrate", ".", "--check")
    assert again.exit_code == 0, again.output


def test_migrate_branch_honours_exclude_globs(repo):
    (repo / "legacy").mkdir()
    (repo / "legacy" / "old.py").write_text(UNSAFE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "legacy", env=IDENTITY)
    result = auxcap("migrate", ".", "--exclude", "legacy/", "--branch", BRANCH)
    assert result.exit_code == 0, result.output
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["app/spec.py"]
    assert (repo / "legacy" / "old.py").read_text() == UNSAFE


def test_format_patch_output_applies_on_a_fresh_clone(repo, tmp_path):
    result = auxcap("migrate", "app", "--branch", BRANCH, "--format-patch", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    patches = sorted((tmp_path / "out").glob("*.patch"))
    assert len(patches) == 1
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "checkout", "-q", "main")
    git(clone, "am", "-q", str(patches[0]), env=IDENTITY)
    assert git(clone, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", "HEAD^{tree}")


def test_dirty_tree_is_refused_and_allow_dirty_keeps_the_user_changes(repo):
    (repo / "NOTES.md").write_text("my edit\n")
    refused = auxcap("migrate", ".", "--branch", BRANCH)
    assert refused.exit_code == 2
    assert "uncommitted changes" in refused.output and "--allow-dirty" in refused.output
    assert git(repo, "branch", "--list", BRANCH) == ""

    allowed = auxcap("migrate", ".", "--branch", BRANCH, "--allow-dirty")
    assert allowed.exit_code == 0, allowed.output
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["app/spec.py"]
    assert (repo / "NOTES.md").read_text() == "my edit\n"
    assert git(repo, "status", "--porcelain") == " M NOTES.md\n"


def test_existing_branch_is_refused(repo):
    git(repo, "branch", BRANCH)
    result = auxcap("migrate", ".", "--branch", BRANCH)
    assert result.exit_code == 2 and "already exists" in result.output


def test_unprocessable_file_fails_the_delivery_and_changes_nothing(repo):
    (repo / "app" / "broken.py").write_text("def broken(:\n    m.set_dspark_layers_to_capture(x)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "broken")
    before = repo_state(repo)
    result = auxcap("migrate", ".", "--branch", BRANCH, "--pr-body", "PR.md")
    assert result.exit_code == 2
    assert "broken.py" in result.output and "back on main" in result.output
    assert_same_state(before, repo_state(repo))


def test_nothing_to_change_creates_no_branch(repo):
    (repo / "app" / "spec.py").write_text(SAFE)
    git(repo, "commit", "-q", "-am", "safe")
    result = auxcap("migrate", ".", "--branch", BRANCH, "--pr-body", "PR.md")
    assert result.exit_code == 0 and "Nothing to change" in result.output
    assert git(repo, "branch", "--list", BRANCH) == "" and not (repo / "PR.md").exists()


def test_base_option(repo):
    first = git(repo, "rev-parse", "HEAD").strip()
    (repo / "NOTES.md").write_text("later\n")
    git(repo, "commit", "-q", "-am", "later")
    result = auxcap("migrate", ".", "--branch", BRANCH, "--base", first)
    assert result.exit_code == 0, result.output
    assert git(repo, "rev-parse", "HEAD^").strip() == first


@pytest.mark.parametrize(
    "extra",
    [
        ["--base", "main"],
        ["--pr-body", "PR.md"],
        ["--allow-dirty"],
        ["--author", "A <a@b.c>"],
        ["--format-patch", "out"],
    ],
)
def test_companion_options_need_branch(repo, extra):
    result = auxcap("migrate", ".", *extra)
    assert result.exit_code == 2 and "only works together with --branch" in result.output


def test_check_and_branch_conflict(repo):
    result = auxcap("migrate", ".", "--check", "--branch", BRANCH)
    assert result.exit_code == 2 and "--check and --branch" in result.output
    result = auxcap("migrate", ".", "--diff", "--branch", BRANCH)
    assert result.exit_code == 2 and "--diff and --branch" in result.output


def test_no_identity_error_and_author_option(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path, identity=False)
    repo = make_app_repo(tmp_path / "demo", branch="trunk")
    monkeypatch.chdir(repo)
    refused = auxcap("migrate", ".", "--branch", BRANCH)
    assert refused.exit_code == 2
    assert "git config user.name" in refused.output and "git config user.email" in refused.output
    done = auxcap("migrate", ".", "--branch", BRANCH, "--author", "Ada <ada@example.org>")
    assert done.exit_code == 0, done.output
    assert "you were on branch trunk" in done.output
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Ada <ada@example.org>"


def test_outside_a_repository_exits_2_with_a_clear_message(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "spec.py").write_text(UNSAFE)
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path), "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", ".", "--branch", BRANCH],
        cwd=plain,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "not inside a git repository" in done.stderr
    assert (plain / "spec.py").read_text() == UNSAFE


def test_ignored_files_are_neither_rewritten_nor_committed(repo):
    (repo / ".gitignore").write_text("generated/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore generated code")
    (repo / "generated").mkdir()
    (repo / "generated" / "spec_copy.py").write_text(UNSAFE)
    result = auxcap("migrate", ".", "--branch", BRANCH)
    assert result.exit_code == 0, result.output
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["app/spec.py"]
    assert (repo / "generated" / "spec_copy.py").read_text() == UNSAFE


def test_run_from_a_subdirectory_of_the_repository(repo, monkeypatch):
    monkeypatch.chdir(repo / "app")
    result = auxcap("migrate", ".", "--branch", BRANCH, "--pr-body", "../PR.md")
    assert result.exit_code == 0, result.output
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["app/spec.py"]
    assert "- `app/spec.py:7`: " in (repo / "PR.md").read_text()


def test_allow_dirty_refuses_to_mix_the_user_edits_into_the_commit(repo):
    (repo / "app" / "spec.py").write_text(UNSAFE + "\n# my edit\n")
    before = repo_state(repo)
    result = auxcap("migrate", ".", "--branch", BRANCH, "--allow-dirty")
    assert result.exit_code == 2
    assert "app/spec.py, which has uncommitted changes of yours" in result.output
    assert_same_state(before, repo_state(repo))
