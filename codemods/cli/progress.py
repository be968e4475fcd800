"""A one-line progress bar for long runs, on a terminal only.

The bar draws nothing unless its stream is a terminal, and nothing during the first
``delay`` seconds, so short runs, pipes, redirections and JSON output never see it.
``clear()`` wipes the line before other output is printed to the same terminal.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_WIDTH = 30


class Progress:
    """Counts finished items out of ``total``; redraws at most every ``interval`` seconds."""

    def __init__(
        self,
        total: int,
        label: str = "files",
        stream: TextIO | None = None,
        enabled: bool = True,
        delay: float = 0.5,
        interval: float = 0.1,
    ) -> None:
        self.total = total
        self.done = 0
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0 and _is_terminal(self.stream)
        self._start = time.monotonic()
        self._delay = delay
        self._interval = interval
        self._last_draw = 0.0
        self._shown = False

    def advance(self, count: int = 1) -> None:
        self.done += count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._start < self._delay or now - self._last_draw < self._interval:
            return
        self._last_draw = now
        self._draw()

    def _draw(self) -> None:
        filled = _WIDTH * self.done // self.total if self.total else _WIDTH
        bar = "#" * filled + "-" * (_WIDTH - filled)
        self.stream.write(f"\r\x1b[K[{bar}] {self.done}/{self.total} {self.label}")
        self.stream.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the bar (if drawn) so that the next output starts on a clean line."""
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    def close(self) -> None:
        self.clear()
        self.enabled = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
