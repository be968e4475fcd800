"""``auxcap migrate --branch`` checks the repository once before it changes anything."""

from __future__ import annotations

from codemods.deliver import git_branch
from tests.cli.test_cli_branch import BRANCH, auxcap, repo  # noqa: F401 - the fixture


def test_migrate_branch_runs_the_preflight_once(repo, monkeypatch):  # noqa: F811
    calls = []
    real = git_branch.preflight

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(git_branch, "preflight", counting)
    result = auxcap("migrate", ".", "--branch", BRANCH, "--pr-body", "PR.md")
    assert result.exit_code == 0, result.output
    assert len(calls) == 1


def test_a_dirty_tree_is_still_refused(repo):  # noqa: F811
    (repo / "app" / "util.py").write_text("x = 1\n")
    result = auxcap("migrate", ".", "--branch", BRANCH)
    assert result.exit_code == 2
    assert "uncommitted changes" in result.output
