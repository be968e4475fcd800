"""Fresh virtualenvs installed the way users install auxcap, running the commands the
README and ``docs/setup.md`` promise for each install.

* ``pip install .`` (base: LibCST, click, GitPython): ``upstream-patch --pr-body``,
  ``upstream-patch --branch`` and ``migrate --branch``; torch is not there.
* ``pip install '.[pp]'`` (base + torch): ``validate-pp --world-size 2``; numpy is not there.
* ``bash scripts/demo.sh``: a base install in its own virtualenv, well under 200 MB.

Each virtualenv is built once per test session.  ``-c scripts/constraints.txt`` keeps torch
on the pinned CPU build; pip's own cache keeps the downloads local after the first run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.disk_usage import disk_usage
from tests.gitrepo import IDENTITY, git, isolate_git
from tests.test_demo import assert_demo_output, run_demo
from tests.upstream.test_upstream_rerun import family_checkout

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = PROJECT_ROOT / "scripts" / "constraints.txt"


def clean_env() -> dict[str, str]:
    """The environment without anything that would let a virtualenv see this checkout or
    the test virtualenv's packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    return env


def python_for_venvs() -> str:
    return shutil.which("python3.11") or sys.executable


def make_venv(where: Path, requirement: str) -> Path:
    """``python -m venv WHERE`` then ``pip install REQUIREMENT`` from this checkout."""
    subprocess.run([python_for_venvs(), "-m", "venv", str(where)], check=True, timeout=120)
    done = subprocess.run(
        [
            str(where / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(CONSTRAINTS),
            requirement,
        ],
        cwd=PROJECT_ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return where


@pytest.fixture(scope="session")
def base_venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venvs") / "base", ".")


@pytest.fixture(scope="session")
def pp_venv(tmp_path_factory) -> Path:
    return make_venv(tmp_path_factory.mktemp("venvs") / "pp", ".[pp]")


def run(venv: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def importable(venv: Path, module: str, cwd: Path) -> bool:
    return run(venv, "python", "-c", f"import {module}", cwd=cwd).returncode == 0


def test_base_install_has_no_torch(base_venv, tmp_path):
    assert importable(base_venv, "codemods.cli.commands", tmp_path)
    assert not importable(base_venv, "torch", tmp_path)
    done = run(base_venv, "auxcap", "validate-pp", cwd=tmp_path)
    assert done.returncode == 2 and "install auxcap[pp]" in done.stderr


def test_base_install_upstream_patch_pr_body_and_branch(base_venv, tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "sglang")
    body = tmp_path / "PR.md"
    done = run(
        base_venv,
        "auxcap",
        "upstream-patch",
        ".",
        "-o",
        str(tmp_path / "pp.patch"),
        "--pr-body",
        str(body),
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "## Benchmarking and Profiling" in body.read_text()

    done = run(
        base_venv,
        "auxcap",
        "upstream-patch",
        ".",
        "--branch",
        "pp/capture",
        "--pr-body",
        str(tmp_path / "branch.md"),
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert "Idempotent: running" in (tmp_path / "branch.md").read_text()
    assert "sglang/srt/layers/aux_hidden_states.py" in git(
        root, "show", "--name-only", "--format=", "pp/capture"
    )


def test_base_install_migrate_branch(base_venv, tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    repo = tmp_path / "app"
    shutil.copytree(PROJECT_ROOT / "fixtures" / "demo_repo", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "App", env=IDENTITY)
    done = run(
        base_venv,
        "auxcap",
        "migrate",
        ".",
        "--branch",
        "auxcap/guard-capture",
        "--pr-body",
        "PR.md",
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr
    assert git(repo, "show", "--name-only", "--format=", "auxcap/guard-capture").split() == [
        "serving/capture_runner.py",
        "train_distill.py",
        "utils/capture.py",
    ]


def test_pp_install_validate_pp_without_numpy(pp_venv, tmp_path):
    assert importable(pp_venv, "torch", tmp_path)
    assert not importable(pp_venv, "numpy", tmp_path)
    done = run(
        pp_venv,
        "auxcap",
        "validate-pp",
        "--world-size",
        "2",
        "--select",
        "one-per-stage [even]",
        "--timeout",
        "60",
        cwd=tmp_path,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = re.search(r"(\d+)/(\d+) scenarios passed", done.stdout)
    assert summary and summary.group(1) == summary.group(2) != "0", done.stdout


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def test_demo_installs_the_base_package_only(tmp_path):
    venv = tmp_path / "venv-demo"
    started = time.monotonic()
    done = run_demo({"AUXCAP_DEMO_VENV": str(venv)}, timeout=600)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert_demo_output(done.stdout)
    assert f"source {venv}/bin/activate" in done.stdout
    assert not importable(venv, "torch", tmp_path)
    assert _size(venv) < 200 * 2**20, _size(venv)
    # The README's figure for the demo ("about N MB"), within a quarter.
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    stated = int(re.search(r"`bash scripts/demo\.sh` \| about (\d+) MB", readme).group(1))
    used = disk_usage(venv)
    assert 0.75 * stated * 1e6 <= used <= 1.25 * stated * 1e6, (used, stated)
    # Seconds on an idle machine with pip's cache warm; generous here for loaded machines.
    assert elapsed < 300, elapsed
