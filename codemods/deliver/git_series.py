"""Commit an ``upstream-patch --series`` as a stack on a new branch, or a ``--stack`` as one
branch per PR, each based on the one before: ``git am -k``, one commit per patch, with the
author git would use.  When a patch does not apply, the branches made are removed and the
work tree is left on its original branch.
"""

from __future__ import annotations

import re
from pathlib import Path

from codemods.deliver.git_basics import GitDeliveryError, _git, _git_ok

DEFAULT_AUTHOR = "auxcap <auxcap@users.noreply.github.com>"


def author_of(root: Path, author: str | None) -> str:
    """``--author``, else git's author identity as seen from ``root`` (``git var
    GIT_AUTHOR_IDENT``: the repository's ``user.name``/``user.email``, the user's global
    ones, or ``GIT_AUTHOR_NAME``/``GIT_AUTHOR_EMAIL``), else a neutral default."""
    if author:
        return author
    cwd = root if root.is_dir() else root.parent
    try:
        ident = _git(cwd, "var", "GIT_AUTHOR_IDENT")
    except (GitDeliveryError, OSError):
        return DEFAULT_AUTHOR
    match = re.match(r"^(.*?<[^>]*>)", ident)
    return match.group(1) if match else DEFAULT_AUTHOR


def commit_stack(tree_root: Path, paths: list[Path], request, repo) -> str:
    """``git am -k`` the series on a new branch ``request.branch`` of ``repo`` (as
    ``request.preflight`` returned it); the new head commit."""
    return commit_branches(tree_root, [(request.branch, paths)], request, repo)[-1]


def commit_branches(
    tree_root: Path, stack: list[tuple[str, list[Path]]], request, repo
) -> list[str]:
    """``git am -k`` each ``(branch, patch files)`` of ``stack`` on a new branch, the
    first from ``request.base`` (default HEAD), each next one from the one before; the
    head commit of each.  When a patch does not apply, every branch made is removed and
    the work tree is left on its original branch."""
    from codemods.deliver.git_branch import check_branch_name  # loads GitPython

    for branch, _paths in stack[1:]:
        check_branch_name(repo, branch)
    repo_root = Path(repo.working_tree_dir).resolve()
    relative = tree_root.resolve().relative_to(repo_root).as_posix()
    directory = [] if relative == "." else [f"--directory={relative}"]
    env = {}
    if request.author:
        name, _, email = request.author.partition("<")
        env = {"GIT_COMMITTER_NAME": name.strip(), "GIT_COMMITTER_EMAIL": email.rstrip(">")}
        if _git_ok(repo, "config", "user.name"):
            env = {}
    original = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    if original == "HEAD":
        original = _git(repo, "rev-parse", "HEAD")
    base = _git(repo, "rev-parse", "--verify", f"{request.base or 'HEAD'}^{{commit}}")
    made: list[str] = []
    heads: list[str] = []
    for branch, paths in stack:
        _git(repo, "checkout", "-q", "--no-track", "-b", branch, heads[-1] if heads else base)
        made.append(branch)
        try:
            _git(
                repo,
                "am",
                "--keep-cr",
                "--keep",
                "--whitespace=nowarn",
                *directory,
                *[str(path.resolve()) for path in paths],
                env=env,
            )
        except GitDeliveryError as error:
            _git_ok(repo, "am", "--abort")
            _git(repo, "checkout", "-q", original)
            for made_branch in made:
                _git(repo, "branch", "-D", made_branch)
            onto = heads[-1] if heads else base
            what = "the series" if len(stack) == 1 else f"the patches of {branch}"
            raise GitDeliveryError(f"{what} does not apply on {onto[:12]}: {error}") from None
        heads.append(_git(repo, "rev-parse", "HEAD"))
    return heads
