"""Every target of ``auxcap upstream-patch`` from one generation of the tree.

The tree is generated once (``generate_or_say``), after the ``--branch`` checks, and that
result feeds what was asked: the plain patch (``-o`` or stdout) and its description, the
series (``--series``), the stack of PRs (``--stack``; with ``--series`` both come from one
series) or the branch (``--branch``, alone or with ``--series`` or ``--stack``).  The
``--branch`` run alone also regenerates the committed tree, to check that it needs nothing
more; that is a check, not a target.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from codemods.cli.upstream_patch import generate_or_say, run_upstream_patch
from codemods.deliver.git_basics import GitDeliveryError
from codemods.sources.fileio import write_output_atomic
from codemods.upstream.result import UpstreamResult


def _usage(
    request, series_dir: str | None, stack_dir: str | None, output, pr_body, validate: bool
) -> None:
    if validate and request is not None and series_dir is None:
        raise click.UsageError("--validate with --branch needs --series")
    if stack_dir is None:
        return
    if validate and series_dir is None:
        raise click.UsageError("--validate with --stack needs --series")
    if request is not None and (series_dir is not None or pr_body or output):
        raise click.UsageError("--branch with --stack takes no --series, --pr-body or -o")


def run_upstream_targets(
    sglang_root: str,
    models: list[str] | None,
    tests_dir: str | None,
    output: str | None,
    pr_body: str | None,
    series_dir: str | None,
    stack_dir: str | None,
    validate: bool,
    request,
    deliver,
) -> int:
    """The exit code of ``upstream-patch`` with these options; ``deliver`` runs a
    ``--branch`` delivery (``commands._deliver``)."""
    _usage(request, series_dir, stack_dir, output, pr_body, validate)
    if request is not None:
        request = dataclasses.replace(request, pr_body=Path(pr_body) if pr_body else None)
        if output and series_dir is None and stack_dir is None:
            # The patch file the branch run writes (left untracked by an earlier run).
            request = dataclasses.replace(request, patch_file=Path(output))
        try:  # a bad branch or work tree is said before the generation
            request.preflight(sglang_root)
        except GitDeliveryError as error:
            click.echo(f"auxcap: error: {error}", err=True)
            return 2
    result = generate_or_say(sglang_root, models, tests_dir)
    if result is None:
        return 2
    if stack_dir is not None:
        return run_targets(
            result, sglang_root, stack_dir, series_dir, output, pr_body, request, validate
        )
    if series_dir is not None:
        from codemods.cli.upstream_series import run_series

        return run_series(result, sglang_root, series_dir, pr_body, output, request, validate)
    if request is not None:
        from codemods.deliver.on_branch import upstream_generated_on_branch

        return deliver(
            lambda _run: upstream_generated_on_branch(
                sglang_root, request, output, models=models, result=result
            )
        )
    return run_upstream_patch(result, output, pr_body, validate=validate)


def run_targets(
    result: UpstreamResult,
    root: str,
    stack_dir: str,
    series_dir: str | None,
    output: str | None,
    pr_body: str | None,
    request=None,
    validate: bool = False,
) -> int:
    """``--stack`` with the other targets asked in the same run, all from ``result`` and
    one series: ``--series`` (which also writes ``-o``, ``--pr-body`` and runs
    ``--validate``), else ``-o`` and ``--pr-body`` here; ``request`` (``--branch``) makes
    the stack's branches."""
    from codemods.cli.upstream_stack import run_stack
    from codemods.upstream.output.series import build_series

    patches = build_series(result)
    code = 0
    if series_dir is not None:
        from codemods.cli.upstream_series import run_series

        code = run_series(result, root, series_dir, pr_body, output, None, validate, patches)
    else:
        if output:
            write_output_atomic(output, result.patch.encode("utf-8"))
        if pr_body and result.patch:
            from codemods.upstream.output.pr_body import render

            write_output_atomic(pr_body, render(result).encode("utf-8"))
    stacked = run_stack(result, root, stack_dir, request, patches)
    return max(code, stacked)
