"""Each command needs only what its install brings.

``pip install auxcap`` brings LibCST, click and GitPython: scan, migrate (``--branch``
included) and upstream-patch (``--pr-body`` and ``--branch`` included) must run with
nothing else.  ``pip install 'auxcap[pp]'`` adds torch, and only torch: validate-pp must
run without numpy.  The fast tests here hide a module from a subprocess (a package of that
name that raises ``ModuleNotFoundError``, first on ``PYTHONPATH``, as Python does for a
module that is not installed); ``test_fresh_installs.py`` installs into real virtualenvs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.gitrepo import IDENTITY, git, isolate_git
from tests.upstream.test_upstream_rerun import family_checkout

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def hide_modules(where: Path, *names: str) -> Path:
    """A folder that, first on ``PYTHONPATH``, makes ``import NAME`` fail as if NAME were
    not installed."""
    for name in names:
        package = where / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    return where


def auxcap_without(hidden: Path, *args: str, cwd: Path, timeout: float = 240):
    """``python -m codemods ARGS`` with the modules in ``hidden`` not importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(PROJECT_ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "codemods", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_hiding_a_module_makes_it_unimportable(tmp_path):
    hidden = hide_modules(tmp_path / "hidden", "torch")
    env = {**os.environ, "PYTHONPATH": str(hidden)}
    done = subprocess.run(
        [sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'torch'" in done.stderr


def test_validate_pp_needs_torch_only_not_numpy(tmp_path):
    hidden = hide_modules(tmp_path / "hidden", "numpy")
    done = auxcap_without(
        hidden,
        "validate-pp",
        "--world-size",
        "3",
        "--mode",
        "both",
        "--select",
        "one-per-stage [even]",
        "--timeout",
        "60",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Numpy is not available" not in done.stdout + done.stderr
    summary = re.search(r"(\d+)/(\d+) scenarios passed", done.stdout)
    assert summary and summary.group(1) == summary.group(2) != "0", done.stdout
    assert " direct " in done.stdout  # the handshake and the dedicated group, too


def test_upstream_pr_body_and_branch_need_no_torch(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    hidden = hide_modules(tmp_path / "hidden", "torch")
    root = family_checkout(tmp_path / "sglang")
    patch, body = tmp_path / "pp.patch", tmp_path / "PR.md"
    done = auxcap_without(
        hidden, "upstream-patch", ".", "-o", str(patch), "--pr-body", str(body), cwd=root
    )
    assert done.returncode == 0, done.stderr
    assert "## Benchmarking and Profiling" in body.read_text()
    assert "diff --git a/sglang/srt/layers/aux_hidden_states.py" in patch.read_text()

    done = auxcap_without(
        hidden,
        "upstream-patch",
        ".",
        "--branch",
        "pp/capture",
        "--pr-body",
        str(tmp_path / "branch.md"),
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "git push -u origin pp/capture" in done.stdout + done.stderr
    assert "Idempotent" in (tmp_path / "branch.md").read_text()
    assert git(root, "status", "--porcelain", "-uall") == ""


def test_migrate_branch_needs_no_torch(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    hidden = hide_modules(tmp_path / "hidden", "torch")
    repo = tmp_path / "app"
    shutil.copytree(PROJECT_ROOT / "fixtures" / "demo_repo", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "App", env=IDENTITY)
    done = auxcap_without(
        hidden,
        "migrate",
        ".",
        "--branch",
        "auxcap/guard",
        "--pr-body",
        str(tmp_path / "PR.md"),
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr
    rewritten = ["serving/capture_runner.py", "train_distill.py", "utils/capture.py"]
    assert git(repo, "show", "--name-only", "--format=", "auxcap/guard").split() == rewritten
    body = (tmp_path / "PR.md").read_text()
    assert all(f"| `{name}` |" in body for name in rewritten)
