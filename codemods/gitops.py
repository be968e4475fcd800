"""Deliver a change through git: a new branch, one commit holding only the files auxcap
rewrote, and ``git format-patch`` output.

The one entry point that changes a repository is :func:`deliver_on_branch`:

before: the user's repository on some branch (or a detached HEAD), possibly with uncommitted
        changes of their own (only with ``allow_dirty``).
after:  a new branch ``NAME`` created from ``base`` (default ``HEAD``) and checked out, with one
        commit that holds exactly the files ``apply_change`` wrote; every other file, the
        user's staged changes and their untracked files are as they were.
on any failure (or Ctrl-C) midway: HEAD, the branch it was on, the index and the work tree
        are put back as they were, the new branch is deleted, and the error is raised as a
        :class:`DeliveryFailed` that says so.

The commit is made with a private index (``GIT_INDEX_FILE``) built from ``base`` plus the
changed files, so the user's staged changes never enter it; hooks (``pre-commit``,
``commit-msg``) run as for any commit.  Everything goes through the ``git`` command line (via
GitPython), so the user's configuration, hooks and signing settings apply unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from codemods import fileio

#: How the CLI names the remote in the push hint when the repository has none.
DEFAULT_REMOTE = "origin"

_AUTHOR_PATTERN = re.compile(r"^\s*(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s]+)>\s*$")
_IN_PROGRESS = {
    "MERGE_HEAD": "a merge",
    "CHERRY_PICK_HEAD": "a cherry-pick",
    "REVERT_HEAD": "a revert",
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or `git am`",
}


# --------------------------------------------------------------------------- errors


class GitDeliveryError(Exception):
    """A delivery that cannot be done; the message says why and what to do."""


class NotARepository(GitDeliveryError):
    pass


class DirtyWorkTree(GitDeliveryError):
    pass


class BranchExists(GitDeliveryError):
    pass


class MissingIdentity(GitDeliveryError):
    pass


class DeliveryFailed(GitDeliveryError):
    """The change failed midway; the repository was put back as it was."""


class RollbackFailed(GitDeliveryError):
    """The change failed midway and restoring the repository failed too."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class DeliveryResult:
    repo_root: Path
    branch: str
    base_commit: str
    #: ``None`` when the change left every file as it was: no branch was created.
    commit: str | None
    #: Repository-relative POSIX paths in the commit, sorted.
    files: tuple[str, ...]
    #: What HEAD was before: a branch name, or ``None`` for a detached HEAD.
    started_on_branch: str | None
    started_at_commit: str
    remote: str = DEFAULT_REMOTE

    @property
    def push_command(self) -> str:
        return f"git push -u {self.remote} {self.branch}"

    def summary(self) -> str:
        """Where the branch is and how to push it, for people."""
        if self.commit is None:
            return "Nothing to change: no branch was created and the repository is untouched."
        was = (
            f"branch {self.started_on_branch}"
            if self.started_on_branch
            else f"a detached HEAD at {self.started_at_commit[:12]}"
        )
        count = len(self.files)
        back = self.started_on_branch or f"--detach {self.started_at_commit[:12]}"
        return "\n".join(
            [
                f"Committed {count} file{'s' if count != 1 else ''} as {self.commit[:12]} "
                f"on new branch {self.branch} (based on {self.base_commit[:12]}).",
                f"Repository: {self.repo_root}",
                f"{self.branch} is checked out; you were on {was}.",
                f"Push it:    {self.push_command}",
                f"Undo it:    git switch {back} && git branch -D {self.branch}",
            ]
        )


# --------------------------------------------------------------------------- small helpers


def parse_author(text: str) -> tuple[str, str]:
    """``"Name <email>"`` -> ``(name, email)``; ``ValueError`` naming the expected form."""
    match = _AUTHOR_PATTERN.match(text or "")
    if not match or not match.group("name"):
        raise ValueError(f'--author must look like "Name <email>", got {text!r}')
    return match.group("name"), match.group("email")


def open_repository(path: Path | str) -> git.Repo:
    """The git work tree that contains ``path``; :class:`NotARepository` otherwise."""
    path = Path(path)
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise NotARepository(
            f"{path} is not inside a git repository; --branch needs one "
            f"(run `git init` and commit first, or drop --branch)"
        ) from None
    if repo.bare or repo.working_tree_dir is None:
        raise NotARepository(f"{path} is a bare git repository; --branch needs a work tree")
    return repo


def _git(repo: git.Repo, *args: str, env: dict[str, str] | None = None, **kwargs) -> str:
    try:
        return repo.git.execute(["git", *args], env=env, **kwargs)
    except git.GitCommandError as error:
        detail = (error.stderr or error.stdout or "").strip()
        detail = detail.removeprefix("stderr: ").strip().strip("'").strip()
        raise GitDeliveryError(f"`git {' '.join(args[:3])}` failed: {detail}") from error


def _git_ok(repo: git.Repo, *args: str) -> bool:
    try:
        repo.git.execute(["git", *args])
    except git.GitCommandError:
        return False
    return True


def _git_path(repo: git.Repo, name: str) -> Path:
    path = Path(_git(repo, "rev-parse", "--git-path", name))
    return path if path.is_absolute() else Path(repo.working_tree_dir) / path


def _status(repo: git.Repo) -> dict[str, str]:
    """Every path that differs from HEAD (index or work tree) or is untracked -> its XY code."""
    raw = repo.git.execute(
        ["git", "--no-optional-locks", "status", "--porcelain=v1", "-z", "-uall", "--no-renames"],
        stdout_as_string=False,
        strip_newline_in_stdout=False,
    )
    entries: dict[str, str] = {}
    for record in raw.split(b"\0"):
        if record:
            entries[os.fsdecode(record[3:])] = record[:2].decode("ascii")
    return entries


def _config(repo: git.Repo, key: str) -> str | None:
    try:
        value = repo.git.execute(["git", "config", "--get", key]).strip()
    except git.GitCommandError:
        return None
    return value or None


def _identity(repo: git.Repo, role: str) -> tuple[str | None, str | None]:
    """The name and email git would use for ``role`` ("author" or "committer")."""
    upper = role.upper()
    name = os.environ.get(f"GIT_{upper}_NAME") or _config(repo, f"{role}.name")
    name = name or _config(repo, "user.name")
    email = os.environ.get(f"GIT_{upper}_EMAIL") or _config(repo, f"{role}.email")
    email = email or _config(repo, "user.email") or os.environ.get("EMAIL")
    return name, email


def _commit_identity_env(repo: git.Repo, author: str | None) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment for ``git commit``; :class:`MissingIdentity` when git has none."""
    if author is not None:
        try:
            name, email = parse_author(author)
        except ValueError as error:
            raise MissingIdentity(str(error)) from None
        env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email}
        committer_name, committer_email = _identity(repo, "committer")
        if not (committer_name and committer_email):
            env.update(GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
        return [], env
    for role in ("author", "committer"):
        name, email = _identity(repo, role)
        if not (name and email):
            missing = " and ".join(
                key for key, value in (("user.name", name), ("user.email", email)) if not value
            )
            raise MissingIdentity(
                f"git has no {missing} configured, so auxcap cannot commit. Set it with\n"
                f'  git config user.name "Your Name"\n'
                f"  git config user.email you@example.com\n"
                f'or pass --author "Your Name <you@example.com>".'
            )
    return [], {}


def _remote_name(repo: git.Repo) -> str:
    names = [remote.name for remote in repo.remotes]
    if not names or DEFAULT_REMOTE in names:
        return DEFAULT_REMOTE
    return names[0]


def _inside(root: Path, path: Path) -> str:
    """``path`` (absolute, or relative to ``root``) as a repository-relative POSIX path."""
    candidate = path if path.is_absolute() else root / path
    # Resolve the parent (symlinked directories) and the file itself when it is a link,
    # so a write through a link to a file outside the repository is refused.
    resolved = candidate.resolve() if candidate.is_symlink() else candidate.parent.resolve()
    resolved = resolved if candidate.is_symlink() else resolved / candidate.name
    try:
        relative = resolved.relative_to(root)
    except ValueError:
        raise GitDeliveryError(
            f"{path} is outside the repository {root}; auxcap only commits files inside it"
        ) from None
    if not relative.parts or relative.parts[0] == ".git":
        raise GitDeliveryError(f"{path} is not a file of the work tree of {root}")
    if candidate.is_dir() and not candidate.is_symlink():
        raise GitDeliveryError(f"{path} is a directory; the change must report the files it wrote")
    return relative.as_posix()


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


# --------------------------------------------------------------------------- delivery


def check_branch_name(repo: git.Repo, branch: str) -> None:
    if (
        not branch
        or branch.startswith("-")
        or branch == "HEAD"
        or not _git_ok(repo, "check-ref-format", f"refs/heads/{branch}")
    ):
        raise GitDeliveryError(f"{branch!r} is not a valid branch name")
    if _git_ok(repo, "show-ref", "--verify", "-q", f"refs/heads/{branch}"):
        raise BranchExists(
            f"branch {branch} already exists; pick another name or delete it with "
            f"`git branch -D {branch}`"
        )


def _refuse_in_progress(repo: git.Repo) -> None:
    for name, what in _IN_PROGRESS.items():
        if _git_path(repo, name).exists():
            raise GitDeliveryError(
                f"the repository is in the middle of {what}; finish or abort it first"
            )


def _describe_dirty(dirty: dict[str, str], limit: int = 8) -> str:
    paths = sorted(dirty)
    shown = ", ".join(paths[:limit])
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return f"{shown}{more}"


def preflight(
    repo_dir: Path | str,
    branch: str,
    base: str | None = None,
    author: str | None = None,
    allow_dirty: bool = False,
) -> git.Repo:
    """Every check :func:`deliver_on_branch` makes before it changes anything.

    Callers run it before doing expensive work (or writing a PR description) so that a bad
    branch name, a dirty tree or a missing identity is reported first.
    """
    repo = open_repository(repo_dir)
    check_branch_name(repo, branch)
    if not _git_ok(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}"):
        raise GitDeliveryError(
            f"the repository {repo.working_tree_dir} has no commit yet; commit something first"
        )
    if base is not None and not _git_ok(repo, "rev-parse", "--verify", "-q", f"{base}^{{commit}}"):
        raise GitDeliveryError(f"--base {base!r} is not a commit, branch or tag of this repository")
    _refuse_in_progress(repo)
    _commit_identity_env(repo, author)
    if not allow_dirty:
        dirty = _status(repo)
        if dirty:
            raise DirtyWorkTree(
                f"the work tree has uncommitted changes or untracked files "
                f"({_describe_dirty(dirty)}); commit or stash them first, or pass "
                f"--allow-dirty to leave them as they are and commit only auxcap's files"
            )
    return repo


def deliver_on_branch(
    repo_dir: Path | str,
    branch: str,
    base: str | None,
    apply_change: Callable[[Path], Sequence[Path | str]],
    message: str | Callable[[Sequence[str]], str],
    author: str | None = None,
    allow_dirty: bool = False,
    checked: git.Repo | None = None,
) -> DeliveryResult:
    """Create ``branch`` from ``base`` (default HEAD), run ``apply_change(repo_root)`` on it and
    commit exactly the files it returns.  See the module docstring for the guarantees.

    ``checked``: the repository as :func:`preflight` returned it for these same arguments,
    when the caller ran it and changed nothing since; otherwise the checks run here.

    ``apply_change`` writes files in the work tree and returns the paths it changed
    (absolute, or relative to the repository root).  It must not report a file that holds
    uncommitted changes of the user, and must not change files it does not report; either
    is refused and rolled back.  ``message`` is the commit message, or a function of the
    committed paths that returns it.
    """
    repo = checked if checked is not None else preflight(repo_dir, branch, base, author, allow_dirty)
    root = Path(repo.working_tree_dir).resolve()
    base_commit = _git(repo, "rev-parse", "--verify", f"{base or 'HEAD'}^{{commit}}")
    author_args, commit_env = _commit_identity_env(repo, author)

    snapshot = _Snapshot(repo, root)
    created_branch: str | None = None
    private_index = snapshot.backup_dir / "commit-index"
    try:
        if base_commit == snapshot.head_commit:
            _git(
                repo,
                "update-ref",
                "-m",
                "auxcap: create branch",
                f"refs/heads/{branch}",
                base_commit,
                "",
            )
            created_branch = branch
            _git(
                repo,
                "symbolic-ref",
                "-m",
                f"auxcap: switch to {branch}",
                "HEAD",
                f"refs/heads/{branch}",
            )
        else:
            _git(repo, "checkout", "-q", "--no-track", "-b", branch, base_commit)
            created_branch = branch

        reported = [_inside(root, Path(path)) for path in apply_change(root)]
        reported = sorted(set(reported))
        _check_reported(repo, snapshot, reported)

        index_env = {"GIT_INDEX_FILE": str(private_index)}
        _git(repo, "read-tree", base_commit, env=index_env)
        literal = {**index_env, "GIT_LITERAL_PATHSPECS": "1"}
        if reported:
            _git(
                repo,
                "add",
                "-A",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                env=literal,
                istream=_nul_stream(reported),
            )
        changed = _git(
            repo,
            "diff-index",
            "--cached",
            "--name-only",
            "-z",
            base_commit,
            env=index_env,
            strip_newline_in_stdout=False,
        )
        files = tuple(sorted(name for name in changed.split("\0") if name))
        if not files:
            snapshot.restore(created_branch)
            snapshot.discard()
            return DeliveryResult(
                root,
                branch,
                base_commit,
                None,
                (),
                snapshot.head_branch,
                snapshot.head_commit,
                _remote_name(repo),
            )

        text = message(files) if callable(message) else message
        _git(
            repo,
            "commit",
            "-q",
            "--no-edit",
            "--cleanup=verbatim",
            "-F",
            "-",
            *author_args,
            env={**index_env, **commit_env},
            istream=_text_stream(text),
        )
        commit = _git(repo, "rev-parse", "--verify", "HEAD^{commit}")
        # The real index: the committed paths now match the new HEAD; everything else the
        # user staged stays staged.
        _git(
            repo,
            "reset",
            "-q",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
            env={"GIT_LITERAL_PATHSPECS": "1"},
            istream=_nul_stream(files),
        )
    except BaseException as error:
        try:
            snapshot.restore(created_branch)
        except Exception as restore_error:  # keep the copies: nothing may be lost
            raise RollbackFailed(
                f"the change failed ({error}) and restoring the repository failed too "
                f"({restore_error}); copies of your changed files and index are kept in "
                f"{snapshot.backup_dir}"
            ) from error
        snapshot.discard()
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        where = snapshot.head_branch or f"detached HEAD {snapshot.head_commit[:12]}"
        raise DeliveryFailed(
            f"{error}\nNothing was committed: the repository is back on {where} as it was, "
            f"and branch {branch} was not created."
        ) from error
    snapshot.discard()
    return DeliveryResult(
        root,
        branch,
        base_commit,
        commit,
        files,
        snapshot.head_branch,
        snapshot.head_commit,
        _remote_name(repo),
    )


def _text_stream(text: str):
    return fileio.temp_stream(text.encode("utf-8"))


def _check_reported(repo: git.Repo, snapshot: _Snapshot, reported: list[str]) -> None:
    """Refuse a change that touched the user's own changes or files it did not report."""
    reported_set = set(reported)
    clobbered = sorted(path for path in reported_set if path in snapshot.dirty)
    if clobbered:
        raise GitDeliveryError(
            f"auxcap would rewrite {', '.join(clobbered)}, which "
            f"{'has' if len(clobbered) == 1 else 'have'} uncommitted changes of yours; commit "
            f"or stash them first so the commit holds only auxcap's change"
        )
    now = _status(repo)
    unreported = sorted(
        path
        for path in set(now) | set(snapshot.copies)
        if path not in reported_set and (path not in snapshot.dirty or snapshot.changed_since(path))
    )
    if unreported:
        raise GitDeliveryError(f"the change wrote files it did not report: {', '.join(unreported)}")
    ignored = [
        path
        for path in reported
        if path not in now
        and _git_ok(repo, "check-ignore", "-q", "--no-index", "--", path)
        and not _git_ok(repo, "ls-files", "--error-unmatch", "--", path)
    ]
    if ignored:
        raise GitDeliveryError(
            f"{', '.join(ignored)} is ignored by git (.gitignore); auxcap does not commit "
            f"ignored files"
        )


# --------------------------------------------------------------------------- format-patch


def format_patch(
    repo: git.Repo | Path | str, base: str, branch: str, out_dir: Path | str
) -> list[Path]:
    """Write ``git format-patch base..branch`` into ``out_dir``; the patch files, in order.

    The files apply with ``git am`` on a fresh clone that has ``base``.
    """
    if not isinstance(repo, git.Repo):
        repo = open_repository(repo)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    listing = _git(
        repo, "format-patch", "--no-signature", "-o", str(out), f"{base}..{branch}", "--"
    )
    return [Path(line) for line in listing.splitlines() if line.strip()]
