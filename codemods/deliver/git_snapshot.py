"""The state of a repository before a delivery, and putting it back: HEAD, the index, and
copies of every file the change may touch (see :mod:`codemods.deliver.git_branch`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import git

from codemods.deliver.git_basics import (
    _git,
    _git_ok,
    _git_path,
    _status,
)
from codemods.sources import fileio

# --------------------------------------------------------------------------- the snapshot


class _Snapshot:
    """Everything needed to put the repository back: HEAD, the index file, and a copy of
    every path that differed from HEAD (the user's own changes, untracked files included).

    The copies live in the git directory, so nothing is lost even if the process dies.
    """

    def __init__(self, repo: git.Repo, root: Path) -> None:
        self.repo = repo
        self.root = root
        self.head_branch: str | None = None
        try:
            self.head_branch = repo.git.execute(["git", "symbolic-ref", "-q", "--short", "HEAD"])
        except git.GitCommandError:
            self.head_branch = None
        self.head_commit = _git(repo, "rev-parse", "--verify", "HEAD^{commit}")
        self.index_path = _git_path(repo, "index")
        auxcap_dir = _git_path(repo, "auxcap")
        auxcap_dir.mkdir(parents=True, exist_ok=True)
        self.backup_dir = Path(tempfile.mkdtemp(prefix="rollback-", dir=auxcap_dir))
        try:
            self._copy_state(root)
        except BaseException:
            self.discard()  # nothing was changed yet: the copies are not needed
            raise

    def _copy_state(self, root: Path) -> None:
        self.index_copy: Path | None = None
        if self.index_path.exists():
            self.index_copy = self.backup_dir / "index"
            shutil.copy2(self.index_path, self.index_copy)
        self.dirty = _status(self.repo)
        #: path -> copy of its bytes, or None when the path did not exist (deleted by the user).
        self.copies: dict[str, Path | None] = {}
        files_dir = self.backup_dir / "files"
        for number, path in enumerate(sorted(self.dirty)):
            source = root / path
            if source.is_symlink() or source.is_file():
                copy = files_dir / str(number)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy, follow_symlinks=False)
                self.copies[path] = copy
            elif not source.exists():
                self.copies[path] = None

    def changed_since(self, path: str) -> bool:
        """Whether a path the user had changed no longer matches its copy."""
        copy = self.copies.get(path)
        current = self.root / path
        if copy is None:
            return current.exists() or current.is_symlink()
        if copy.is_symlink() or current.is_symlink():
            return not (
                copy.is_symlink()
                and current.is_symlink()
                and os.readlink(copy) == os.readlink(current)
            )
        return not current.is_file() or current.read_bytes() != copy.read_bytes()

    def restore(self, created_branch: str | None) -> None:
        """Put HEAD, the branch list, the index and the work tree back as they were."""
        repo, root = self.repo, self.root
        if self.head_branch:
            _git(repo, "symbolic-ref", "HEAD", f"refs/heads/{self.head_branch}")
        else:
            _git(repo, "update-ref", "--no-deref", "HEAD", self.head_commit)
        if created_branch and _git_ok(
            repo, "show-ref", "--verify", "-q", f"refs/heads/{created_branch}"
        ):
            _git(repo, "update-ref", "-d", f"refs/heads/{created_branch}")
        if self.index_copy is not None:
            staging = self.index_path.with_name(self.index_path.name + ".auxcap-restore")
            shutil.copy2(self.index_copy, staging)
            os.replace(staging, self.index_path)
        elif self.index_path.exists():
            self.index_path.unlink()

        from_index: list[str] = []
        for path, code in _status(repo).items():
            if path in self.copies:
                continue
            if code == "??":  # created by the change
                _remove_with_empty_parents(root, root / path)
            else:  # a file that was clean: the restored index holds its content
                from_index.append(path)
        if from_index:
            repo.git.execute(
                ["git", "checkout-index", "-f", "-z", "--stdin"],
                istream=_nul_stream(from_index),
            )
        for path, copy in self.copies.items():
            target = root / path
            if not self.changed_since(path):
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            if copy is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(copy, target, follow_symlinks=False)

    def discard(self) -> None:
        shutil.rmtree(self.backup_dir, ignore_errors=True)
        try:
            self.backup_dir.parent.rmdir()
        except OSError:
            pass


def _nul_stream(paths: Iterable[str]):
    return fileio.temp_stream(b"".join(os.fsencode(path) + b"\0" for path in paths))


def _remove_with_empty_parents(root: Path, path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    parent = path.parent
    while parent != root and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
