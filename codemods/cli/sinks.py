"""Where ``auxcap migrate`` sends each file's result: the outputs the command line chooses.

before: the per-file results of one run, in path order, with their bytes.
after:  what the run prints: diffs (``diff``), "would change" lines (``check``), "changed"
        lines (``write``; the engine wrote the files), and with ``--format json`` a CodeTF
        report at the end (``json``), a line per call site left for review or skipped
        (``sites``); with ``--branch`` the run writes and commits on a new branch
        (``branch``, through :mod:`codemods.deliver.on_branch`), its results passed on to the
        ``sites`` sink as they come.

A sink sees every result once (``add``) and may print something when the run ends
(``finish``); the command line owns the exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from codemods.callers.records import Action, FileResult, Status, is_skipped
from codemods.cli import terminal
from codemods.output import report

if TYPE_CHECKING:
    from codemods.deliver.on_branch import Delivered, RunEngine
    from codemods.output.codetf import ReportBuilder, RunInfo


class Sink:
    def add(self, result: FileResult) -> None:
        """One file's result, as soon as it is known."""

    def finish(self) -> None:
        """The run is over."""


@dataclass
class DiffSink(Sink):
    """A unified diff of every changed file on stdout (coloured on a terminal), written as
    bytes: the file's own bytes (encoding, BOM, CRLF) reach the diff unchanged, so it
    applies with ``git apply`` or ``patch -p1``."""

    colour: bool = False

    def add(self, result: FileResult) -> None:
        if result.status is Status.CHANGED:
            diff = report.unified_diff_bytes(result)
            if self.colour:  # latin-1 maps every byte to one character and back
                diff = terminal.colour_diff(diff.decode("latin-1")).encode("latin-1")
            click.echo(diff, nl=False, color=self.colour)


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


class SitesSink(Sink):
    """A line on stderr per call site left for review (``review: ...``) or left alone on
    purpose (``skipped: ...``: a test module, another engine, capture required)."""

    def add(self, result: FileResult) -> None:
        for site in result.call_sites:
            if Action.REVIEW in site.actions:
                click.echo(f"review: {report.format_site(site)}", err=True)
            elif is_skipped(site):
                click.echo(f"skipped: {report.format_site(site)}", err=True)


@dataclass
class BranchSink(Sink):
    """``--branch``: ``deliver`` (a flow of :mod:`codemods.deliver.on_branch`) writes and
    commits on a new branch, running the engine it is given; each result written on the branch
    reaches ``inner`` as it comes, and ``finish`` prints the re-check failures and where the
    branch is.  The delivery raises ``GitDeliveryError`` for the command line to report."""

    deliver: Callable[[RunEngine], Delivered]
    inner: Sequence[Sink] = field(default_factory=lambda: [SitesSink()])
    delivered: Delivered | None = None

    def run(self, engine_run: RunEngine) -> None:
        def teed(paths, options, write: bool) -> Iterator[FileResult]:
            for result in engine_run(paths, options, write):
                if write:  # not the read-only idempotence re-run
                    self.add(result)
                yield result

        self.delivered = self.deliver(teed)

    def add(self, result: FileResult) -> None:
        for sink in self.inner:
            sink.add(result)

    def finish(self) -> None:
        for sink in self.inner:
            sink.finish()
        assert self.delivered is not None, "finish() before run()"
        for path, reason in self.delivered.verification.failures:
            click.echo(f"auxcap: error: {path}: re-check failed: {reason}", err=True)
        click.echo(self.delivered.summary())

    @property
    def verified(self) -> bool:
        """The committed files passed the re-check (and a second run changes nothing)."""
        return self.delivered is not None and self.delivered.verification.ok


def for_mode(mode: str, output_format: str, colour: bool) -> list[Sink]:
    """The per-file sinks of ``migrate`` in ``mode`` (diff, check, write) and format; the
    JSON sink is added by the caller, which knows the run's command line."""
    if mode == "diff":
        outputs: list[Sink] = [DiffSink(colour)] if output_format == "text" else []
    else:
        outputs = [ListSink("would change" if mode == "check" else "changed")]
    return [*outputs, SitesSink()]
