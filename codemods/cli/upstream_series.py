"""``auxcap upstream-patch --series DIR [--branch NAME]``: the patch as an ordered series.

Without ``--branch`` the series is written to DIR (``0001-....patch`` ...), each file
written atomically; patch files of an earlier, different series left in DIR are refused
rather than silently mixed in.  With ``--branch`` the series is also committed in the SGLang
git work tree as a stack (``git am -k``, one commit per patch) on a new branch; when a patch
does not apply, the branch is removed and the work tree is left on its original branch.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from codemods.cli.upstream_patch import validation_verdict
from codemods.deliver.git_basics import GitDeliveryError
from codemods.deliver.git_series import author_of, commit_stack
from codemods.sources.fileio import write_output_atomic
from codemods.upstream.output.series import SeriesPatch, build_series, render_series
from codemods.upstream.result import UpstreamResult

_SERIES_NAME = re.compile(r"^\d{4}-.*\.patch$")


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}", err=True)


def write_series(directory: Path, files: dict[str, str]) -> list[Path]:
    """Write the series into ``directory``; refuses (nothing written) when it holds patch
    files of another series."""
    if directory.exists() and not directory.is_dir():
        raise click.ClickException(f"{directory}: not a directory")
    if directory.is_dir():
        stale = sorted(
            entry.name
            for entry in directory.iterdir()
            if _SERIES_NAME.match(entry.name) and entry.name not in files
        )
        if stale:
            raise click.ClickException(
                f"{directory}: holds patch files of another series ({', '.join(stale)}); "
                f"remove them or choose an empty directory"
            )
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = directory / name
        write_output_atomic(str(path), text.encode("utf-8"))
        written.append(path)
    return written


def run_series(
    result: UpstreamResult,
    root: str,
    series_dir: str,
    pr_body: str | None,
    output: str | None = None,
    request=None,
    validate: bool = False,
    patches: list[SeriesPatch] | None = None,
) -> int:
    """Write the series of ``result`` (``generate_or_say`` on ``root``; ``patches``: the
    series, when already built) and, with a ``request``, commit it on a branch."""
    where = result.tree.describe()
    if patches is None:
        patches = build_series(result)
    if not patches:
        _say(f"{where}: nothing to do; the series is empty.")
        return 0
    repo = None
    if request is not None:
        try:
            repo = request.preflight(result.tree.root)
        except GitDeliveryError as error:
            _say(f"error: {error}")
            return 2
    author = author_of(Path(root), request.author if request is not None else None)
    files = render_series(patches, author)
    try:
        written = write_series(Path(series_dir), files)
    except click.ClickException as error:
        _say(f"error: {error.message}")
        return 2
    if output:
        write_output_atomic(output, result.patch.encode("utf-8"))
    validation = None
    if validate:
        from codemods.cli.upstream_patch import run_validation

        validation = run_validation(result)
    if pr_body:
        from codemods.upstream.output.pr_body import render

        body = render(result, series=list(zip(files, patches, strict=True)), validation=validation)
        write_output_atomic(pr_body, body.encode("utf-8"))
    _say(f"{where}: series of {len(patches)} patches written to {series_dir}:")
    for path, patch in zip(written, patches, strict=True):
        count = len(patch.paths)
        _say(f"  {path.name}: {patch.subject} ({count} file{'s' if count != 1 else ''})")
    verdict = validation_verdict(validation)
    if request is not None and verdict:
        _say(f"nothing committed on branch {request.branch}: the validation did not pass")
        return verdict
    if request is not None:
        try:
            head = commit_stack(result.tree.root, written, request, repo)
        except GitDeliveryError as error:
            _say(f"error: {error}")
            return 2
        _say(f"committed {len(patches)} commits on branch {request.branch} (head {head[:12]})")
    return verdict
