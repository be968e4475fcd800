"""The ``upstream-patch`` commands of ``docs/upstream.md`` run as written, with
``/path/to/sglang`` a git checkout of an SGLang package with capture-hook models: the single
patch with its PR description, applied with ``git -C``; the series, applied with ``git am``
or committed as a stack with ``--branch``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from readme_blocks import commands

from tests.gitrepo import IDENTITY, git, isolate_git
from tests.upstream.test_upstream_rerun import family_checkout

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def run_lines(lines: list[str], sglang: Path, cwd: Path) -> subprocess.CompletedProcess:
    python = shlex.quote(sys.executable)
    body = "\n".join(line.replace("/path/to/sglang", shlex.quote(str(sglang))) for line in lines)
    script = f'set -euo pipefail\nauxcap() {{ {python} -m codemods "$@"; }}\n{body}'
    env = {**os.environ, **IDENTITY, "PYTHONPATH": str(PROJECT_ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


def changed_files(checkout: Path) -> list[str]:
    return git(checkout, "status", "--porcelain", "--untracked-files=all").splitlines()


def test_single_patch_example_applies(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    lines = commands("Upstream patch (`auxcap upstream-patch`)")
    assert [line.split()[:2] for line in lines] == [["auxcap", "upstream-patch"], ["git", "-C"]]
    checkout = family_checkout(tmp_path / "sglang")
    work = tmp_path / "work"
    work.mkdir()
    done = run_lines(lines, checkout, work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "pp-aux.md").read_text().startswith("# [PP]")
    changed = changed_files(checkout)
    assert any(row.endswith("sglang/srt/layers/aux_hidden_states.py") for row in changed)
    assert any(row.startswith(" M sglang/srt/models/family_") for row in changed), changed


def test_series_example_applies_with_git_am_or_commits_a_stack(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    lines = commands("A reviewable series")
    assert [line.split()[:2] for line in lines] == [
        ["auxcap", "upstream-patch"],
        ["git", "-C"],
        ["auxcap", "upstream-patch"],
    ]
    generate, apply, branch = lines
    for name, steps in (("am", [generate, apply]), ("branch", [generate, branch])):
        checkout = family_checkout(tmp_path / name / "sglang")
        work = tmp_path / name / "work"
        work.mkdir()
        done = run_lines(steps, checkout, work)
        assert done.returncode == 0, done.stdout + done.stderr
        patches = sorted(path.name for path in (work / "pp-series").glob("*.patch"))
        assert patches and patches[0].startswith("0001-"), patches
        assert changed_files(checkout) == []
        head = git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip()
        assert head == ("main" if name == "am" else "pp-aux-capture")
        subjects = git(checkout, "log", "--format=%s", "main~0" if name == "am" else "HEAD")
        assert len(subjects.splitlines()) == 1 + len(patches), subjects
