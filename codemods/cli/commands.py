"""Command-line interface.  Thin: parse options, call the library, print, set the exit code.

Exit codes: 0 nothing to do / success; 1 changes needed (``--check``) or a check failed;
2 usage error, a file that could not be processed or a folder that could not be listed
(never 0 then), or an ``upstream-patch --validate`` that could not run.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from codemods import __version__
from codemods.callers import engine
from codemods.callers.options import TransformOptions
from codemods.callers.records import FileResult, Status
from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import HOOK_OPTION_HELP
from codemods.catalog.hooks import custom_hook
from codemods.cli import sinks, terminal
from codemods.cli.codemod_options import CodemodCommand
from codemods.cli.commandline import command_line
from codemods.cli.sglang_commands import sglang
from codemods.output import report
from codemods.sources.collect import FileCollectionError

if TYPE_CHECKING:  # delivery loads GitPython: only --branch needs it
    from codemods.deliver.on_branch import BranchRequest

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2


def _validate_hooks(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]):
    for name in value:
        try:
            custom_hook(name)
        except ValueError as error:
            raise click.BadParameter(str(error), ctx=ctx, param=param) from error
    return value


_paths = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
_hook_option = click.option(
    "--hook",
    "extra_hooks",
    multiple=True,
    callback=_validate_hooks,
    metavar="NAME",
    help=HOOK_OPTION_HELP,
)
# Test modules are only reported unless asked for.
_include_tests_option = click.option(
    "--include-tests",
    is_flag=True,
    help="Rewrite test modules too (test_*.py, *_test.py, conftest.py, under tests/); "
    "calls inside pytest.raises / assertRaises are never rewritten.",
)


def _branch_options(pr_body: bool = True):
    """``--branch`` and its companions, shared by migrate and upstream-patch; the command
    gets them as one ``request`` (a ``BranchRequest``, or None without ``--branch``)."""
    options = [
        click.option(
            "--branch",
            metavar="NAME",
            help="Commit the change on a new git branch NAME (created from HEAD).",
        ),
        click.option(
            "--base",
            metavar="REF",
            help="With --branch: create the branch from REF instead of HEAD.",
        ),
    ]
    if pr_body:
        options.append(
            click.option(
                "--pr-body",
                type=click.Path(dir_okay=False, path_type=Path),
                metavar="FILE",
                help="With --branch: write a PR description (Markdown).",
            )
        )
    options += [
        click.option(
            "--format-patch",
            "patch_dir",
            metavar="DIR",
            type=click.Path(file_okay=False, path_type=Path),
            help="With --branch: write `git format-patch` files into DIR.",
        ),
        click.option(
            "--allow-dirty",
            is_flag=True,
            help="With --branch: accept uncommitted changes; they are left as they "
            "are and only auxcap's files are committed.",
        ),
        click.option(
            "--author",
            metavar='"NAME <EMAIL>"',
            help="With --branch: commit author (also the committer when git has "
            "no identity configured).",
        ),
    ]

    def decorate(command):
        for option in reversed(options):
            command = option(command)

        @functools.wraps(command)
        def wrapper(*args, branch, base, patch_dir, allow_dirty, author, **kwargs):
            description = kwargs.pop("pr_body") if pr_body else None
            request = _branch_request(branch, base, description, patch_dir, allow_dirty, author)
            return command(*args, request=request, **kwargs)

        return wrapper

    return decorate


def _branch_request(
    branch: str | None,
    base: str | None,
    pr_body: Path | None,
    patch_dir: Path | None,
    allow_dirty: bool,
    author: str | None,
) -> BranchRequest | None:
    """The --branch request, or None; a usage error when a companion comes without it."""
    if branch is None:
        given = [
            name
            for name, value in (
                ("--base", base),
                ("--pr-body", pr_body),
                ("--format-patch", patch_dir),
                ("--allow-dirty", allow_dirty),
                ("--author", author),
            )
            if value
        ]
        if given:
            raise click.UsageError(f"{', '.join(given)} only works together with --branch")
        return None
    from codemods.deliver.on_branch import BranchRequest

    return BranchRequest(branch, base, author, allow_dirty, pr_body, patch_dir)


def _git_delivery_error() -> type[Exception]:
    from codemods.deliver.git_branch import GitDeliveryError

    return GitDeliveryError


def _deliver(deliver) -> int:
    """Run a --branch delivery (``deliver``: a flow of ``deliver.on_branch`` taking the engine)
    through the branch sink; the exit code (2 with the reason on failure, 1 when the committed
    files fail their re-check)."""
    from codemods.callers.engine import run

    sink = sinks.BranchSink(deliver)
    try:
        sink.run(run)
    except _git_delivery_error() as error:
        click.echo(f"auxcap: error: {error}", err=True)
        return EXIT_ERROR
    sink.finish()
    return EXIT_OK if sink.verified else EXIT_CHANGES


def _shown(*decls: str, type: click.ParamType, default: object, help: str):
    """An option whose default ``--help`` shows."""
    return click.option(*decls, type=type, default=default, show_default=True, help=help)


def _file_options(command):
    """Options shared by the commands that walk paths: file selection and execution."""
    decorators = [
        click.option(
            "--exclude",
            multiple=True,
            metavar="GLOB",
            help="Skip files and folders matching GLOB (.gitignore-style, relative to the "
            "PATH argument; repeatable).",
        ),
        click.option(
            "--include",
            multiple=True,
            metavar="GLOB",
            help="Only look at files matching GLOB (.gitignore-style; repeatable).",
        ),
        click.option(
            "--force-exclude",
            is_flag=True,
            help="Apply --exclude and the skipped folders to files named explicitly too.",
        ),
        click.option(
            "--follow-links",
            is_flag=True,
            help="Process symlinks found in folders that lead out of PATHS (or to files "
            "not selected), and walk symlinked folders that lead out of PATHS. Without it "
            "they are reported, not followed. A symlink whose target is processed anyway "
            "is never a second file.",
        ),
        click.option(
            "--jobs",
            "-j",
            type=click.IntRange(min=1),
            default=None,
            help="Worker processes for parsing [default: one per CPU; used only when "
            "enough files need parsing].",
        ),
        click.option(
            "--no-prefilter",
            "prefilter",
            flag_value=False,
            default=True,
            hidden=True,
            help="Parse every file, not only those whose text mentions a hook (checks, "
            "benchmarks).",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)

    @functools.wraps(command)
    def wrapper(*args, exclude, include, force_exclude, follow_links, jobs, prefilter, **kwargs):
        selection = engine.Selection(tuple(include), tuple(exclude), force_exclude, follow_links)
        execution = engine.Execution(jobs=jobs, prefilter=prefilter)
        try:
            return command(*args, selection=selection, execution=execution, **kwargs)
        except FileCollectionError as error:
            raise click.UsageError(str(error)) from None

    return wrapper


def _report_failures(results: list[FileResult]) -> None:
    for result in results:
        if result.status is Status.FAILED:
            label = terminal.error_label("auxcap: error:", _colour(err=True))
            click.echo(f"{label} {result.path}: {result.error}", err=True, color=_colour(True))


def _existing(paths: tuple[str, ...]) -> tuple[list[str], int]:
    """The paths that exist, and how many did not: each missing one is named once on
    stderr here and is not a file of the run (no result, not counted as scanned); exit 2."""
    kept = []
    for path in paths:
        if os.path.lexists(path):
            kept.append(path)
            continue
        label = terminal.error_label("auxcap: error:", _colour(err=True))
        click.echo(
            f"{label} {path}: cannot read: no such file or directory", err=True, color=_colour(True)
        )
    return kept, len(paths) - len(kept)


def _report_links(links: dict[str, str]) -> None:
    """One line on stderr per symlink that is not a file of the run, saying why."""
    for path in sorted(links, key=lambda name: name.split(os.sep)):
        click.echo(f"auxcap: {path}: {links[path]}", err=True)


def _not_found(missing: int) -> str:
    return f", {missing} path(s) not found" if missing else ""


def _colour(err: bool = False) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set."""
    return terminal.colour_enabled(sys.stderr if err else sys.stdout)


def _folder_option(*decls: str, help: str):
    """An option naming a folder to write into (None when not given)."""
    return click.option(
        *decls, type=click.Path(file_okay=False, writable=True), default=None, help=help
    )


def _format_option(help_text: str):
    """``--format text|json`` (``output_format``), with the command's own help."""
    return _shown(
        "--format",
        "output_format",
        type=click.Choice(["text", "json"]),
        default="text",
        help=help_text,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="auxcap")
def cli() -> None:
    """Find and fix calls of SGLang aux-hidden-state capture hooks, and generate the
    upstream patch that makes capture work under pipeline parallelism."""


@cli.command()
@_paths
@_format_option("Listing format.")
@_hook_option
@_include_tests_option
@_file_options
def scan(
    paths: tuple[str, ...],
    output_format: str,
    extra_hooks: tuple[str, ...],
    include_tests: bool,
    selection: engine.Selection,
    execution: engine.Execution,
) -> None:
    """List every capture-hook call site under PATHS with its shape and risk."""
    options = TransformOptions(extra_hooks=extra_hooks, include_tests=include_tests)
    execution = dataclasses.replace(execution, progress=output_format != "json")
    existing, missing = _existing(paths)
    links: dict[str, str] = {}
    results = list(engine.scan(existing, options, selection, execution, links)) if existing else []
    _report_links(links)
    if output_format == "json":
        click.echo(report.scan_json(results), nl=False)
    else:
        click.echo(report.scan_text(results), nl=False)
        click.echo(report.Summary.of(results).text("to change") + _not_found(missing), err=True)
        hint = report.pp_silent_hint(results)
        if hint:
            click.echo(hint, err=True)
    _report_failures(results)
    failed = missing or any(r.status is Status.FAILED for r in results)
    sys.exit(EXIT_ERROR if failed else EXIT_OK)


# One --<codemod>-policy option per registered codemod (after --write), and the codemods in
# the epilog: from the registry, when the command is used.
@cli.command(cls=CodemodCommand, policies_after="write")
@_paths
@click.option(
    "--diff", "show_diff", is_flag=True, help="Print a unified diff; change nothing (default)."
)
@click.option(
    "--check", is_flag=True, help="Change nothing; exit 1 when changes are needed, 0 when none."
)
@click.option("--write", is_flag=True, help="Rewrite the files in place.")
@_format_option(
    "text: diffs and messages; json: a CodeTF-shaped report on stdout (docs/report.md)."
)
@click.option(
    "--exit-zero",
    is_flag=True,
    help="Exit 0 even when --check finds changes (errors still exit 2).",
)
@_hook_option
@_include_tests_option
@_file_options
@_branch_options()
@click.pass_context
def migrate(
    ctx: click.Context,
    paths: tuple[str, ...],
    show_diff: bool,
    check: bool,
    write: bool,
    extra_hooks: tuple[str, ...],
    include_tests: bool,
    request: BranchRequest | None,
    output_format: str,
    exit_zero: bool,
    selection: engine.Selection,
    execution: engine.Execution,
    **policies: str,
) -> None:
    """Guard and wrap capture-hook calls under PATHS (diff by default).

    With --branch NAME, the rewritten files are committed on a new branch NAME in the git
    repository that holds PATHS, and nothing else is touched.
    """
    started = time.monotonic()
    if show_diff + check + write > 1:
        raise click.UsageError("--diff, --check and --write are mutually exclusive")
    mode = "write" if write else "check" if check else "diff"
    # Only policy options are here; TransformOptions takes them as ``**named_policies``.
    named: dict[str, Any] = dict(policies)
    options = TransformOptions(**named, extra_hooks=extra_hooks, include_tests=include_tests)
    if request is not None:
        if check or show_diff:
            flag = "--check" if check else "--diff"
            raise click.UsageError(f"{flag} and --branch cannot be used together")
        if output_format == "json":
            raise click.UsageError("--format json and --branch cannot be used together")
        chosen = {m.policy.label: policies[m.policy.dest] for m in registry.CODEMODS}
        if extra_hooks:
            chosen["extra hooks"] = ", ".join(extra_hooks)
        from codemods.deliver.on_branch import migrate_on_branch

        sys.exit(
            _deliver(
                lambda run: migrate_on_branch(
                    list(paths), options, request, chosen, run=run, selection=selection
                )
            )
        )
    execution = dataclasses.replace(execution, progress=True)
    existing, missing = _existing(paths)
    results = []
    outputs = sinks.for_mode(mode, output_format, _colour())
    if output_format == "json":
        from codemods.output import codetf  # loads LibCST: only for the report

        def run_info() -> codetf.RunInfo:
            return codetf.RunInfo(
                command_line=command_line(ctx),
                elapsed_ms=round((time.monotonic() - started) * 1000),
                mode=mode,
            )

        outputs.append(sinks.JsonSink(codetf.ReportBuilder(options, str(Path.cwd())), run_info))
    links: dict[str, str] = {}
    stream = (
        engine.run(existing, options, mode == "write", selection, execution, links)
        if existing
        else ()
    )
    for result in stream:
        for sink in outputs:
            sink.add(result)
        # Keep only the records for the summary: the bytes are printed and dropped.
        results.append(dataclasses.replace(result, original=None, rewritten=None, steps=()))
    _report_links(links)
    _report_failures(results)
    label = "changed" if mode == "write" else "to change"
    click.echo(report.Summary.of(results).text(label) + _not_found(missing), err=True)
    for sink in outputs:
        sink.finish()
    if missing or any(result.status is Status.FAILED for result in results):
        sys.exit(EXIT_ERROR)
    needs_changes = any(result.status is Status.CHANGED for result in results)
    if mode == "check" and needs_changes and not exit_zero:
        sys.exit(EXIT_CHANGES)
    sys.exit(EXIT_OK)


@cli.command("upstream-patch")
@click.argument("sglang_root", type=click.Path(file_okay=False, path_type=str))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write the patch here (default: stdout).",
)
@click.option(
    "--pr-body",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write a Markdown pull-request description here.",
)
@click.option(
    "--models",
    default=None,
    metavar="NAME,...",
    help="Only these model files (e.g. llama,qwen3,kimi_linear); default: Kimi-Linear "
    "and every recognised model with a capture hook.",
)
@_folder_option(
    "--series",
    "series_dir",
    help="Write the patch as an ordered series (0001-....patch: runtime and sizing, one "
    "patch per model family, validation) into this directory; with --branch, commit it "
    "as a stack.",
)
@_folder_option(
    "--stack",
    "stack_dir",
    help="Write the patch as a stack of pull requests into this directory, in merge order: "
    "one folder per PR (01-helpers/ ...: its commits as format-patch files and its PR.md) "
    "and an index, STACK.md; with --branch NAME, commit each PR on a branch NAME-<folder> "
    "based on the one before.",
)
@click.option(
    "--validate",
    is_flag=True,
    default=False,
    help="Run the family test the patch adds on a patched copy of the tree (CPU stand-ins: "
    "tiny configs, stand-in decoder layers, gloo, 2 and 3 stages; needs SGLang's "
    "dependencies in this Python) and report its verdicts in the PR description as CPU "
    "stand-in results. Exit 1 when a model fails it, 2 when it could not run.",
)
@_folder_option(
    "--tests-dir",
    help="Also write the CPU tests the patch ships into this folder. A checkout's patch "
    "carries them (test/registered/unit/models/); an installed or unpacked package tree "
    "has no test folder, so they are left out of its patch unless written here.",
)
@_branch_options(pr_body=False)
def upstream_patch(
    sglang_root: str,
    output: str | None,
    pr_body: str | None,
    models: str | None,
    series_dir: str | None,
    stack_dir: str | None,
    validate: bool,
    tests_dir: str | None,
    request: BranchRequest | None,
) -> None:
    """Generate the SGLang patch that makes aux capture work under pipeline parallelism:
    Kimi-Linear (DSPARK) and every model whose capture hooks return early on non-last PP
    ranks (reported one line per model file with a hook).  SGLANG_ROOT is an SGLang git
    checkout or an installed or unpacked package tree; patch paths are relative to it
    (apply there with git apply).

    With --branch NAME (SGLANG_ROOT in a git work tree), the patch is applied and committed
    on a new branch NAME instead of being printed.
    """
    from codemods.cli.upstream_patch import parse_models
    from codemods.cli.upstream_targets import run_upstream_targets

    raise SystemExit(
        run_upstream_targets(
            sglang_root,
            parse_models(models),
            tests_dir,
            output,
            pr_body,
            series_dir,
            stack_dir,
            validate,
            request,
            _deliver,
        )
    )


@cli.command("validate-pp")
@_shown(
    "--world-size",
    type=click.IntRange(2, 16),
    default=4,
    help="Largest pipeline size; the matrix runs every size from 2 to N.",
)
@_shown(
    "--backend",
    type=click.Choice(["gloo", "nccl"]),
    default="gloo",
    help="gloo on CPU, or NCCL with one GPU per rank.",
)
@_shown(
    "--mode",
    type=click.Choice(["relay", "direct", "both"]),
    default="both",
    help="Transport mode(s) to validate.",
)
@_shown(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    help="Seconds without progress after which a scenario counts as hung.",
)
@click.option(
    "--select",
    metavar="TEXT",
    default=None,
    help="Only scenarios whose label ('P=4 direct one-per-stage ...') has TEXT.",
)
def validate_pp(
    world_size: int, backend: str, mode: str, timeout: float, select: str | None
) -> None:
    """Validate aux hidden-state capture under pipeline parallelism in real processes."""
    try:
        from codemods.ppcheck.command import validate_pp as run
    except ImportError as err:  # torch is an optional dependency
        click.echo(f"error: validate-pp needs torch ({err}); install auxcap[pp]", err=True)
        raise SystemExit(2) from err
    raise SystemExit(run(world_size, backend, mode, timeout, select, echo=click.echo))


cli.add_command(sglang)


def main() -> None:
    cli(prog_name="auxcap")
