"""The pre-commit hooks of ``.pre-commit-hooks.yaml``, installed for real with
``pre-commit try-repo``.

The project (tracked and untracked-but-not-ignored files, so uncommitted work counts) is
copied into a git repository and committed there with a fixed date, so that the same content
gives the same commit and pre-commit reuses the hook environment it built before (cached in
``$AUXCAP_PRE_COMMIT_HOME`` or ``~/.cache/auxcap/pre-commit``).  pre-commit builds that
environment with pip from the package index; ``PIP_CONSTRAINT`` pins torch to the project's
build, and the test checks that the environment holds no torch at all (auxcap's base
dependencies do not need it).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from readme_blocks import code_block

ROOT = Path(__file__).resolve().parent.parent
HOOKS_FILE = ROOT / ".pre-commit-hooks.yaml"
CACHE = Path(
    os.environ.get("AUXCAP_PRE_COMMIT_HOME", Path.home() / ".cache" / "auxcap" / "pre-commit")
)

UNGUARDED = textwrap.dedent("""\
    def enable_capture(model, args):
        model.set_dspark_layers_to_capture(args.capture_layers)
    """)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env
    )
    return result.stdout


def _project_files() -> list[str]:
    listing = _git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    return sorted(name for name in listing.split("\0") if name and (ROOT / name).is_file())


def _fixed_git_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
    }
    env.update(
        GIT_AUTHOR_NAME="auxcap tests",
        GIT_AUTHOR_EMAIL="tests@auxcap.invalid",
        GIT_COMMITTER_NAME="auxcap tests",
        GIT_COMMITTER_EMAIL="tests@auxcap.invalid",
        GIT_AUTHOR_DATE="2000-01-01T00:00:00+0000",
        GIT_COMMITTER_DATE="2000-01-01T00:00:00+0000",
    )
    return env


def _hook_repository() -> Path:
    """A committed copy of the project at a path fixed by its content (so it is cached)."""
    files = _project_files()
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    repo = CACHE / "hook-repos" / digest.hexdigest()[:16]
    if (repo / ".git").is_dir() and (repo / HOOKS_FILE.name).is_file():
        return repo
    staging = repo.with_name(repo.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    for name in files:
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    env = _fixed_git_env()
    _git(staging, "init", "-q", "-b", "main", env=env)
    _git(staging, "add", "-A", env=env)
    _git(staging, "commit", "-q", "--no-gpg-sign", "-m", "hook repository", env=env)
    shutil.rmtree(repo, ignore_errors=True)
    staging.rename(repo)
    return repo


def _target_repository(tmp_path: Path) -> Path:
    target = tmp_path / "target"
    target.mkdir()
    env = _fixed_git_env()
    _git(target, "init", "-q", "-b", "main", env=env)
    (target / "train.py").write_text(UNGUARDED)
    _git(target, "add", "train.py", env=env)
    return target


def _pre_commit_env() -> dict[str, str]:
    env = _fixed_git_env()
    env["PRE_COMMIT_HOME"] = str(CACHE / "home")
    env["PIP_CONSTRAINT"] = str(ROOT / "scripts" / "constraints.txt")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("NO_COLOR", None)
    env["PRE_COMMIT_COLOR"] = "never"
    return env


def _pre_commit(target: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pre_commit", *args, "--color", "never"]
    return subprocess.run(
        command, cwd=target, capture_output=True, text=True, env=_pre_commit_env(), timeout=840
    )


def test_hooks_file_is_modelled_on_ruff():
    hooks = {hook["id"]: hook for hook in yaml.safe_load(HOOKS_FILE.read_text())}
    assert set(hooks) == {"auxcap", "auxcap-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == ["python", "pyi"]
        assert hook["require_serial"] is True
        assert hook["entry"].startswith("auxcap migrate ")
    assert "--check" in hooks["auxcap"]["entry"].split()
    assert "--write" in hooks["auxcap-fix"]["entry"].split()


def test_project_dependencies_do_not_pull_torch():
    """pre-commit installs the hook with the base dependencies only: torch must not be one."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.lower().startswith("torch") for dep in project["dependencies"])


def test_try_repo_fails_on_unguarded_call_and_passes_after_fix(tmp_path):
    """``try-repo`` builds a throwaway environment each time (pip's cache still helps), so the
    first invocation runs both hooks (``auxcap`` fails, then ``auxcap-fix`` rewrites) and a
    second one sees ``auxcap`` pass."""
    started = time.monotonic()
    hook_repo = _hook_repository()
    target = _target_repository(tmp_path)
    result = _pre_commit(target, "try-repo", str(hook_repo), "--files", "train.py")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    check, fix = output.split("- hook id: auxcap-fix", 1)
    assert "- hook id: auxcap\n" in check and "would change: train.py" in check, output
    assert "files were modified by this hook" in fix and "changed: train.py" in fix, output
    fixed = (target / "train.py").read_text()
    assert "if args.capture_layers:" in fixed and "except NotImplementedError" in fixed

    again = _pre_commit(target, "try-repo", str(hook_repo), "auxcap", "--files", "train.py")
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    assert "Passed" in output and "Failed" not in output, output
    print(f"pre-commit try-repo, twice: {time.monotonic() - started:.1f}s")


def test_pinned_hook_fails_then_passes_after_fix(tmp_path):
    """The configuration of "Use with pre-commit" (``repo`` + ``rev`` + hooks), run with
    ``pre-commit run``; its environment is cached in PRE_COMMIT_HOME between runs."""
    started = time.monotonic()
    hook_repo = _hook_repository()
    rev = _git(hook_repo, "rev-parse", "HEAD").strip()
    target = _target_repository(tmp_path)
    # The documented configuration, pointed at the local copy instead of the published URL.
    config = yaml.safe_load(code_block("Use with pre-commit", "yaml"))
    assert config["repos"][0]["hooks"] == [{"id": "auxcap", "args": ["--exclude", "legacy/"]}]
    config["repos"][0].update(repo=str(hook_repo), rev=rev)
    (target / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (target / "legacy").mkdir()
    (target / "legacy" / "old.py").write_text(UNGUARDED)
    _git(target, "add", ".pre-commit-config.yaml", "legacy/old.py", env=_fixed_git_env())

    failing = _pre_commit(target, "run", "--all-files")
    output = failing.stdout + failing.stderr
    assert failing.returncode == 1, output
    assert "Failed" in output and "would change: train.py" in output, output
    # pre-commit names legacy/old.py explicitly; the hook's --force-exclude drops it.
    assert "legacy/old.py" not in output, output
    assert (target / "train.py").read_text() == UNGUARDED  # --check changes nothing

    fixed = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "--write", "train.py"],
        cwd=target,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert fixed.returncode == 0, fixed.stderr
    passing = _pre_commit(target, "run", "--all-files")
    output = passing.stdout + passing.stderr
    assert passing.returncode == 0, output
    assert "Passed" in output, output

    environments = glob.glob(str(CACHE / "home" / "repo*" / "py_env-*"))
    assert environments, "pre-commit built no python environment"
    installed = [
        Path(path).name.lower()
        for env in environments
        for path in glob.glob(os.path.join(env, "lib", "python*", "site-packages", "*"))
    ]
    assert "libcst" in installed and "codemods" in installed, installed
    assert not any(name.startswith("torch") for name in installed), installed
    print(
        f"pre-commit run (cached environment after the first run): "
        f"{time.monotonic() - started:.1f}s"
    )
