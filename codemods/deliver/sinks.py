"""Where ``auxcap migrate`` sends each file's result: the outputs the command line chooses.

before: the per-file results of one run, in path order, with their bytes.
after:  what the run prints: diffs (``diff``), "would change" lines (``check``), "changed"
        lines (``write``; the engine wrote the files), and with ``--format json`` a CodeTF
        report at the end (``json``).  ``--branch`` delivers through
        :mod:`codemods.deliver.on_branch` instead.

A sink sees every result once (``add``) and may print something when the run ends
(``finish``); the command line owns the exit code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from codemods.callers.records import FileResult, Status
from codemods.cli import terminal
from codemods.output import report

if TYPE_CHECKING:
    from codemods.output.codetf import ReportBuilder, RunInfo


class Sink:
    def add(self, result: FileResult) -> None:
        """One file's result, as soon as it is known."""

    def finish(self) -> None:
        """The run is over."""


@dataclass
class DiffSink(Sink):
    """A unified diff of every changed file on stdout (coloured on a terminal)."""

    colour: bool = False

    def add(self, result: FileResult) -> None:
        if result.status is Status.CHANGED:
            diff = report.unified_diff(result)
            text = terminal.colour_diff(diff) if self.colour else diff
            click.echo(text, nl=False, color=self.colour)


@dataclass
class ListSink(Sink):
    """A line on stderr per changed file: ``would change: PATH`` or ``changed: PATH``."""

    label: str

    def add(self, result: FileResult) -> None:
        if result.status is Status.CHANGED:
            click.echo(f"{self.label}: {result.path}", err=True)


@dataclass
class JsonSink(Sink):
    """The CodeTF-shaped report on stdout when the run ends (docs/report.md)."""

    builder: ReportBuilder
    run_info: Callable[[], RunInfo]  # how the run went, asked for once it is over

    def add(self, result: FileResult) -> None:
        self.builder.add(result)

    def finish(self) -> None:
        from codemods.output import codetf

        click.echo(codetf.dumps(self.builder.build(self.run_info())), nl=False)


def for_mode(mode: str, output_format: str, colour: bool) -> list[Sink]:
    """The per-file sinks of ``migrate`` in ``mode`` (diff, check, write) and format; the
    JSON sink is added by the caller, which knows the run's command line."""
    if mode == "diff":
        return [DiffSink(colour)] if output_format == "text" else []
    return [ListSink("would change" if mode == "check" else "changed")]
