"""The walk-through of the "Migrate a repo into a PR branch" page (``docs/delivery.md``) runs
as written, and so does its undo rule."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from readme_blocks import code_block, page_with

from tests.gitrepo import git, isolate_git

PROJECT_ROOT = Path(__file__).resolve().parents[1]


WALKTHROUGH = "Migrate a repo into a PR branch"


def walkthrough() -> str:
    return code_block(WALKTHROUGH, "bash")


def test_walkthrough_runs_and_pushes_the_branch(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    python = shlex.quote(sys.executable)
    # `auxcap` is this checkout's CLI.
    script = f'set -euo pipefail\nauxcap() {{ {python} -m codemods "$@"; }}\n{walkthrough()}'
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "git push -u origin auxcap/guard-capture" in done.stdout
    remote = tmp_path / "demo-remote.git"
    pushed = git(remote, "show", "--name-only", "--format=%s", "auxcap/guard-capture").split("\n")
    assert pushed[0].startswith("Guard aux hidden-state capture calls")
    assert "app/spec.py" in pushed
    assert "- `app/spec.py:7`: " in (tmp_path / "demo" / "PR.md").read_text()


def readme_undo() -> list[str]:
    """The commands of the page's "To undo a delivered branch" rule, in order."""
    text = " ".join(page_with(WALKTHROUGH).read_text(encoding="utf-8").split())
    rule = text.split("To undo a delivered branch:", 1)[1].split("after merging", 1)[0]
    return re.findall(r"`([^`]+)`", rule)


def test_undo_undoes_and_the_same_command_runs_again(tmp_path, monkeypatch):
    """Steps 1 to 3, the page's undo: the repository is as before step 2 (nothing
    untracked), and step 2 runs again."""
    isolate_git(monkeypatch, tmp_path)
    python = shlex.quote(sys.executable)
    steps = walkthrough().split("# 4.", 1)[0]
    branch_command = next(
        line for line in steps.splitlines() if line.startswith("auxcap migrate . --branch")
    )
    undo = readme_undo()
    assert undo and "PR.md" in " ".join(undo), undo
    script = "\n".join(
        [
            "set -euo pipefail",
            f'auxcap() {{ {python} -m codemods "$@"; }}',
            steps,
            *undo,
            'test -z "$(git status --porcelain --untracked-files=all)"',
            'test "$(git symbolic-ref --short HEAD)" = main',
            'test -z "$(git branch --list auxcap/guard-capture)"',
            branch_command,
        ]
    )
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert git(tmp_path / "demo", "branch", "--list", "auxcap/guard-capture").strip()
