"""How a long ``auxcap sglang`` command reports where it is: a step and, where it counts
items, how many of them are done.  The library reports; the CLI draws (on a terminal
only, ``cli/progress.PhaseBar``)."""

from __future__ import annotations

from typing import Protocol


class Phases(Protocol):
    """``phase`` starts a step (``total`` items, or None for a step without a count);
    ``advance`` counts one item of it."""

    def phase(self, label: str, total: int | None = None) -> None: ...

    def advance(self) -> None: ...


class NoPhases:
    """Reports nowhere."""

    def phase(self, label: str, total: int | None = None) -> None:
        pass

    def advance(self) -> None:
        pass


NO_PHASES = NoPhases()
