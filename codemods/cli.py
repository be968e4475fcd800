"""Command-line interface.  Thin: parse options, call the library, print, set the exit code.

Exit codes: 0 nothing to do / success; 1 changes needed (``--check``) or a check failed;
2 usage error or a file that could not be processed.
"""

from __future__ import annotations

import sys

import click

from codemods import __version__, engine, report
from codemods.fallback import FALLBACK_POLICIES
from codemods.guard import GUARD_POLICIES
from codemods.hooks import custom_hook
from codemods.records import Action, FileResult, Status
from codemods.transform import TransformOptions

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2


def _validate_hooks(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]):
    for name in value:
        try:
            custom_hook(name)
        except ValueError as error:
            raise click.BadParameter(str(error), ctx=ctx, param=param) from error
    return value


_paths = click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=str)
)
_hook_option = click.option(
    "--hook",
    "extra_hooks",
    multiple=True,
    callback=_validate_hooks,
    metavar="NAME",
    help="Also treat NAME as a capture hook that rejects None (repeatable).",
)


def _report_failures(results: list[FileResult]) -> None:
    for result in results:
        if result.status is Status.FAILED:
            click.echo(f"auxcap: error: {result.path}: {result.error}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="auxcap")
def cli() -> None:
    """Find and fix calls of SGLang aux-hidden-state capture hooks, and generate the
    upstream patch that makes capture work under pipeline parallelism."""


@cli.command()
@_paths
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json"]), default="text",
    show_default=True, help="Listing format.",
)
@_hook_option
def scan(paths: tuple[str, ...], output_format: str, extra_hooks: tuple[str, ...]) -> None:
    """List every capture-hook call site under PATHS with its shape and risk."""
    options = TransformOptions(extra_hooks=extra_hooks)
    results = list(engine.scan(paths, options))
    if output_format == "json":
        click.echo(report.scan_json(results), nl=False)
    else:
        click.echo(report.scan_text(results), nl=False)
        click.echo(report.Summary.of(results).text(), err=True)
    _report_failures(results)
    sys.exit(EXIT_ERROR if any(r.status is Status.FAILED for r in results) else EXIT_OK)


@cli.command()
@_paths
@click.option("--diff", "mode", flag_value="diff", default=True,
              help="Print the changes as a unified diff; change nothing (default).")
@click.option("--check", "mode", flag_value="check",
              help="Change nothing; exit 1 when changes are needed, 0 when none.")
@click.option("--write", "mode", flag_value="write", help="Rewrite the files in place.")
@click.option("--guard-policy", type=click.Choice(GUARD_POLICIES), default="skip",
              show_default=True, help="When layer ids are unset: skip the call, or raise.")
@click.option("--fallback-policy", type=click.Choice(FALLBACK_POLICIES), default="warn",
              show_default=True,
              help="Under pipeline parallelism: warn and continue, or re-raise with a hint.")
@_hook_option
def migrate(
    paths: tuple[str, ...],
    mode: str,
    guard_policy: str,
    fallback_policy: str,
    extra_hooks: tuple[str, ...],
) -> None:
    """Guard and wrap capture-hook calls under PATHS (diff by default)."""
    options = TransformOptions(guard_policy, fallback_policy, extra_hooks)
    results = []
    for result in engine.run(paths, options, write=mode == "write"):
        results.append(result)
        if result.status is Status.CHANGED:
            if mode == "diff":
                click.echo(report.unified_diff(result), nl=False)
            elif mode == "check":
                click.echo(f"would change: {result.path}", err=True)
            else:
                click.echo(f"changed: {result.path}", err=True)
        for site in result.call_sites:
            if Action.REVIEW in site.actions:
                click.echo(f"review: {report.format_site(site)}", err=True)
    _report_failures(results)
    label = "changed" if mode == "write" else "to change"
    click.echo(report.Summary.of(results).text(label), err=True)
    if any(result.status is Status.FAILED for result in results):
        sys.exit(EXIT_ERROR)
    if mode == "check" and any(result.status is Status.CHANGED for result in results):
        sys.exit(EXIT_CHANGES)
    sys.exit(EXIT_OK)


def main() -> None:
    cli(prog_name="auxcap")
