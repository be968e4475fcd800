"""The README's caller-codemod examples run as written from the repository root."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from readme_blocks import commands

from tests.gitrepo import IDENTITY, git, isolate_git

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEMO = PROJECT_ROOT / "fixtures" / "demo_repo"


def demo_root(tmp_path: Path) -> Path:
    """A git repository laid out like this one where the examples look: the bundled demo
    under ``fixtures/demo_repo/``."""
    root = tmp_path / "root"
    shutil.copytree(DEMO, root / "fixtures" / "demo_repo")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "demo", env=IDENTITY)
    return root


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess:
    python = shlex.quote(sys.executable)
    script = f'auxcap() {{ {python} -m codemods "$@"; }}\n{line}'
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "NO_COLOR": "1"}
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_caller_codemod_examples_run_as_written(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = demo_root(tmp_path)
    lines = commands("Caller codemods")
    assert [line.split()[:2] for line in lines] == [
        ["auxcap", "scan"],
        ["auxcap", "scan"],
        ["auxcap", "migrate"],
        ["auxcap", "migrate"],
        ["auxcap", "migrate"],
        ["git", "checkout"],
    ]
    codes = []
    for line in lines:
        done = run_line(line, root)
        codes.append(done.returncode)
        assert "no such file" not in done.stderr, (line, done.stderr)
        if "--write" in line:
            rewritten = (root / "fixtures/demo_repo/train_distill.py").read_text()
            assert "raise ValueError(" in rewritten  # --guard-policy raise
        if "--format json" in line:
            assert json.loads(done.stdout)["summary"]["call_sites"] == 6
    # scan, scan json, diff, check (changes needed), write, checkout
    assert codes == [0, 0, 0, 1, 0, 0]
    assert git(root, "status", "--porcelain") == ""


def test_choosing_files_example_runs_as_written(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = demo_root(tmp_path)
    line = commands("Choosing files")[0]
    done = run_line(line, root)
    assert done.returncode == 0, done.stderr
    changed = [row[len("+++ b/") :] for row in done.stdout.splitlines() if row.startswith("+++ ")]
    assert changed == ["fixtures/demo_repo/serving/capture_runner.py"]
