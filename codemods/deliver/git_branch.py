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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import git

from codemods.deliver.git_basics import (  # the errors and helpers below are part of this API
    _IN_PROGRESS,
    DEFAULT_REMOTE,
    BranchExists,
    DeliveryFailed,
    DirtyWorkTree,
    GitDeliveryError,
    MissingIdentity,
    NotARepository,
    RollbackFailed,
    _commit_identity_env,
    _git,
    _git_ok,
    _git_path,
    _inside,
    _remote_name,
    _status,
    open_repository,
    parse_author,
    work_tree,
)
from codemods.deliver.git_snapshot import _nul_stream, _Snapshot
from codemods.sources import fileio

__all__ = [
    "DEFAULT_REMOTE",
    "BranchExists",
    "DeliveryFailed",
    "DeliveryResult",
    "DirtyWorkTree",
    "GitDeliveryError",
    "MissingIdentity",
    "NotARepository",
    "RollbackFailed",
    "check_branch_name",
    "deliver_on_branch",
    "format_patch",
    "open_repository",
    "parse_author",
    "preflight",
]

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


def _untracked_outputs(repo: git.Repo, dirty: dict[str, str], outputs: Iterable[Path | str]):
    """The untracked paths among ``outputs`` (files auxcap writes itself), as status keys."""
    root = work_tree(repo).resolve()
    for output in outputs:
        try:
            path = Path(os.path.abspath(output))
            name = (path.parent.resolve() / path.name).relative_to(root).as_posix()
        except ValueError:
            continue
        if dirty.get(name) == "??":
            yield name


def preflight(
    repo_dir: Path | str,
    branch: str,
    base: str | None = None,
    author: str | None = None,
    allow_dirty: bool = False,
    outputs: Iterable[Path | str] = (),
) -> git.Repo:
    """Every check :func:`deliver_on_branch` makes before it changes anything.

    Callers run it before doing expensive work (or writing a PR description) so that a bad
    branch name, a dirty tree or a missing identity is reported first.  ``outputs`` are the
    files the run writes itself (the PR description, the patch): left untracked in the work
    tree by an earlier run, they do not make it dirty.
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
        for name in list(_untracked_outputs(repo, dirty, outputs)):
            del dirty[name]
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
    outputs: Iterable[Path | str] = (),
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
    repo = (
        checked
        if checked is not None
        else preflight(repo_dir, branch, base, author, allow_dirty, outputs)
    )
    root = work_tree(repo).resolve()
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
