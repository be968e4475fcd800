"""Git basics for delivery: the errors, identity and status helpers, one ``_git`` runner
(GitPython's ``repo.git.execute``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import git

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


def work_tree(repo: git.Repo) -> Path:
    """The work tree of ``repo`` (one :func:`open_repository` gives has one)."""
    if repo.working_tree_dir is None:
        raise NotARepository(f"{repo.git_dir} is a bare git repository; --branch needs a work tree")
    return Path(repo.working_tree_dir)


def _git(where: git.Repo | Path, *args: str, env: dict[str, str] | None = None, **kwargs) -> str:
    """Run ``git *args`` in a repository (or a folder, which need not be in one): the one
    way auxcap runs git.  ``env`` adds to the environment; a failure raises
    :class:`GitDeliveryError` naming the command and git's message."""
    runner = where.git if isinstance(where, git.Repo) else git.Git(str(where))
    try:
        return runner.execute(["git", *args], env=env, **kwargs)
    except git.GitCommandError as error:
        detail = (error.stderr or error.stdout or "").strip()
        detail = detail.removeprefix("stderr: ").strip().strip("'").strip()
        raise GitDeliveryError(f"`git {' '.join(args[:3])}` failed: {detail}") from error


def _git_ok(where: git.Repo | Path, *args: str) -> bool:
    try:
        _git(where, *args)
    except GitDeliveryError:
        return False
    return True


def _git_path(repo: git.Repo, name: str) -> Path:
    path = Path(_git(repo, "rev-parse", "--git-path", name))
    return path if path.is_absolute() else work_tree(repo) / path


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
        known_name, known_email = _identity(repo, role)
        if not (known_name and known_email):
            known = (("user.name", known_name), ("user.email", known_email))
            missing = " and ".join(key for key, value in known if not value)
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
