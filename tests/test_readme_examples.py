"""The caller-codemod examples (``docs/callers.md``, and the README's, which are lines of
them) run as written from the repository root."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from readme_blocks import README, code_blocks, commands, section_text

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


def test_readme_scan_and_migrate_example_runs_as_written(tmp_path, monkeypatch):
    """The README's first example: scan, the diff, and ``--check`` exiting 1."""
    isolate_git(monkeypatch, tmp_path)
    root = demo_root(tmp_path)
    block = code_blocks(README.read_text(encoding="utf-8"), "bash")[1]
    lines = [line for line in block.splitlines() if line.strip()]
    assert [line.split()[:3] for line in lines] == [
        ["auxcap", "scan", "fixtures/demo_repo/"],
        ["auxcap", "migrate", "fixtures/demo_repo/"],
        ["auxcap", "migrate", "--check"],
    ]
    done = [run_line(line, root) for line in lines]
    assert [d.returncode for d in done] == [0, 0, 1], [d.stderr for d in done]
    assert "train_distill.py:" in done[0].stdout
    assert "+++ b/fixtures/demo_repo/train_distill.py" in done[1].stdout
    assert git(root, "status", "--porcelain") == ""


def test_one_call_before_and_after_is_what_migrate_writes():
    """The before/after of ``docs/callers.md`` is ``migrate``'s output, and the README shows
    exactly that pair."""
    from codemods.callers.options import TransformOptions
    from codemods.callers.records import Status
    from codemods.callers.transform import transform_source

    before, after = code_blocks(section_text("One call, before and after"), "python")[:2]
    result = transform_source(before.encode(), "configure.py", TransformOptions())
    assert result.status is Status.CHANGED, result.error
    assert result.rewritten.decode() == after
    assert code_blocks(README.read_text(encoding="utf-8"), "python") == [before, after]
