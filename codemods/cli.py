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


@cli.command("validate-pp")
@click.option("--world-size", type=click.IntRange(2, 16), default=4, show_default=True,
              help="Largest pipeline size; the matrix runs every size from 2 to N.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo",
              show_default=True, help="gloo on CPU, or NCCL with one GPU per rank.")
@click.option("--mode", type=click.Choice(["relay", "direct", "both"]), default="both",
              show_default=True, help="Transport mode(s) to validate.")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds without progress after which a scenario counts as hung.")
@click.option("--select", metavar="TEXT", default=None,
              help="Only scenarios whose label ('P=4 direct one-per-stage ...') has TEXT.")
def validate_pp(world_size: int, backend: str, mode: str, timeout: float,
                select: str | None) -> None:
    """Validate aux hidden-state capture under pipeline parallelism in real processes."""
    try:
        from codemods.ppcheck.command import validate_pp as run
    except ImportError as err:  # torch is an optional dependency
        click.echo(f"error: validate-pp needs torch ({err}); install auxcap[pp]", err=True)
        raise SystemExit(2) from err
    raise SystemExit(run(world_size, backend, mode, timeout, select, echo=click.echo))


def main() -> None:
    cli(prog_name="auxcap")
