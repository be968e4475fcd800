"""Command-line interface.  Thin: parse options, call the library, print, set the exit code.

Exit codes: 0 nothing to do / success; 1 changes needed (``--check``) or a check failed;
2 usage error or a file that could not be processed.
"""

from __future__ import annotations

import click

from codemods import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="auxcap")
def cli() -> None:
    """Find and fix calls of SGLang aux-hidden-state capture hooks, and generate the
    upstream patch that makes capture work under pipeline parallelism."""


@cli.command("upstream-patch")
@click.argument("sglang_root", type=click.Path(file_okay=False, path_type=str))
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the patch here (default: stdout).")
@click.option("--pr-body", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write a Markdown pull-request description here.")
@click.option("--mode", type=click.Choice(["relay", "direct"]), default="relay",
              show_default=True, help="How captures reach the last PP stage.")
@click.option("--models", default=None, metavar="NAME,...",
              help="Only these model files (e.g. llama,qwen3,kimi_linear); default: "
                   "Kimi-Linear and every recognised model with a capture hook.")
def upstream_patch(sglang_root: str, output: str | None, pr_body: str | None,
                   mode: str, models: str | None) -> None:
    """Generate the SGLang patch that makes aux capture work under pipeline parallelism:
    Kimi-Linear (DSPARK) and every model whose capture hooks return early on non-last PP
    ranks (reported one line per model file with a hook).  SGLANG_ROOT is an SGLang git
    checkout or an installed or unpacked package tree; patch paths are relative to it
    (apply there with git apply)."""
    from codemods.upstream.cli_support import parse_models, run_upstream_patch

    raise SystemExit(run_upstream_patch(sglang_root, output, pr_body, mode,
                                        parse_models(models)))


def main() -> None:
    cli(prog_name="auxcap")
