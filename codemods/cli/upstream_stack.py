"""``auxcap upstream-patch --stack DIR [--branch NAME]``: the patch as a stack of PRs.

DIR gets one folder per PR in merge order (``01-helpers/`` ...), each with its commits as
``git format-patch`` files and its description (``PR.md``), and the stack's index
(``STACK.md``); each file is written atomically.  Folders of an earlier, different stack
left in DIR are refused rather than silently mixed in.  With ``--branch NAME`` each PR is
also committed (``git am -k``) on a branch of its own, ``NAME-01-helpers`` ..., each based
on the one before; when a patch does not apply, the branches are removed and the work tree
is left on its original branch.  The stack is cut from the series of the same generation
(``upstream/output/stack.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from codemods.cli.upstream_series import write_series
from codemods.deliver.git_basics import GitDeliveryError
from codemods.deliver.git_series import author_of, commit_branches
from codemods.sources.fileio import write_output_atomic
from codemods.upstream.output.series import SeriesPatch, render_series
from codemods.upstream.output.stack import build_stack
from codemods.upstream.output.stack_body import BODY, INDEX, render_index, render_pr
from codemods.upstream.result import UpstreamResult

_PR_FOLDER = re.compile(r"^\d{2}-")


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}", err=True)


def branch_names(branch: str, names: list[str]) -> list[str]:
    """The branch of each PR: ``NAME-<PR folder>``."""
    return [f"{branch}-{name}" for name in names]


def _stale(directory: Path, names: list[str]) -> list[str]:
    if directory.exists() and not directory.is_dir():
        raise click.ClickException(f"{directory}: not a directory")
    if not directory.is_dir():
        return []
    return sorted(
        entry.name
        for entry in directory.iterdir()
        if entry.is_dir() and _PR_FOLDER.match(entry.name) and entry.name not in names
    )


def run_stack(
    result: UpstreamResult,
    root: str,
    stack_dir: str,
    request=None,
    patches: list[SeriesPatch] | None = None,
) -> int:
    """Write the stack of ``result`` (``generate_or_say`` on ``root``; ``patches``: its
    series, when already built) and, with a ``request``, commit each PR on a branch."""
    where = result.tree.describe()
    try:
        prs = build_stack(result, patches)
    except ValueError as error:
        _say(f"error: {where}: {error}")
        return 2
    if not prs:
        _say(f"{where}: nothing to do; the stack is empty.")
        return 0
    directory = Path(stack_dir)
    names = [pr.name for pr in prs]
    repo = None
    if request is not None:
        try:
            repo = request.preflight(result.tree.root)
        except GitDeliveryError as error:
            _say(f"error: {error}")
            return 2
    try:
        stale = _stale(directory, names)
    except click.ClickException as error:
        _say(f"error: {error.message}")
        return 2
    if stale:
        _say(
            f"error: {directory}: holds PR folders of another stack ({', '.join(stale)}); "
            "remove them or choose an empty directory"
        )
        return 2
    author = author_of(Path(root), request.author if request is not None else None)
    written: list[list[Path]] = []
    try:
        for pr in prs:
            folder = directory / pr.name
            written.append(write_series(folder, render_series(pr.commits, author)))
            body = render_pr(pr, prs, result)
            write_output_atomic(str(folder / BODY), body.encode("utf-8"))
    except click.ClickException as error:
        _say(f"error: {error.message}")
        return 2
    write_output_atomic(str(directory / INDEX), render_index(prs, result).encode("utf-8"))
    _say(f"{where}: stack of {len(prs)} PRs written to {stack_dir} (index: {INDEX}):")
    for pr in prs:
        count = len(pr.commits)
        _say(
            f"  {pr.name}: {pr.title} ({count} commit{'s' if count != 1 else ''}, "
            f"{pr.code_lines} changed lines outside tests)"
        )
    if request is None:
        return 0
    branches = branch_names(request.branch, names)
    try:
        heads = commit_branches(
            result.tree.root, list(zip(branches, written, strict=True)), request, repo
        )
    except GitDeliveryError as error:
        _say(f"error: {error}")
        return 2
    _say(f"committed {len(prs)} branches, each on the one before:")
    for branch, head in zip(branches, heads, strict=True):
        _say(f"  {branch} (head {head[:12]})")
    return 0
