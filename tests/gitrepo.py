"""Real git repositories for tests, isolated from the machine's git configuration."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "Repo Owner",
    "GIT_AUTHOR_EMAIL": "owner@example.com",
    "GIT_COMMITTER_NAME": "Repo Owner",
    "GIT_COMMITTER_EMAIL": "owner@example.com",
}
IDENTITY_VARIABLES = (*IDENTITY, "EMAIL")

MODEL_A = b"""def setup(model, layer_ids=None):
    model.set_dspark_layers_to_capture(layer_ids)
"""
MODEL_B = b"""def other(model):
    return model
"""


def isolate_git(monkeypatch, tmp_path: Path, *, identity: bool = True) -> Path:
    """Point git at a private global config (with or without an identity); no system config."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    config = home / "gitconfig"
    lines = ["[init]\n\tdefaultBranch = main\n", "[advice]\n\tdetachedHead = false\n"]
    if identity:
        lines.append("[user]\n\tname = Test User\n\temail = test@example.com\n")
    config.write_text("".join(lines))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in (*IDENTITY_VARIABLES, "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    # git must not guess an identity from the host name.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.useConfigOnly")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")
    return config


def git(cwd: Path, *args: str, check: bool = True, env: dict | None = None) -> str:
    merged = {**os.environ, **(env or {})}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=merged, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def make_repo(path: Path, *, branch: str = "main") -> Path:
    """A repository with one commit: two model files and a README."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    (path / "src").mkdir()
    (path / "src" / "model_a.py").write_bytes(MODEL_A)
    (path / "src" / "model_b.py").write_bytes(MODEL_B)
    (path / "README.md").write_text("# demo\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Initial commit", env=IDENTITY)
    return path


def work_tree_files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


def index_path(root: Path) -> Path:
    path = Path(git(root, "rev-parse", "--git-path", "index").strip())
    return path if path.is_absolute() else root / path


def repo_state(root: Path) -> dict:
    """Everything a failed delivery must leave exactly as it was."""
    head = git(root, "symbolic-ref", "-q", "HEAD", check=False).strip() or "detached"
    return {
        "head_ref": head,
        "head": git(root, "rev-parse", "HEAD").strip(),
        "branches": git(root, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
        "index": index_path(root).read_bytes(),
        "staged": git(root, "--no-optional-locks", "diff", "--cached", "--name-status"),
        "status": git(root, "--no-optional-locks", "status", "--porcelain=v1", "-uall"),
        "files": work_tree_files(root),
    }


def assert_same_state(before: dict, after: dict) -> None:
    """Compare two :func:`repo_state` results field by field, with readable failures."""
    for key in before:
        assert before[key] == after[key], key
