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


def main() -> None:
    cli(prog_name="auxcap")
