"""One-line progress for long runs, on a terminal only.

``Progress`` counts files; ``PhaseBar`` shows the step of a longer command (what is being
done, its count where it has one, and how long it has taken), redrawn from a background
thread so a step that counts nothing (a generation, a compile) still shows the time
passing.  Both draw nothing unless their stream is a terminal, and nothing during the
first ``delay`` seconds, so short runs, pipes, redirections and JSON output never see them.
``clear()`` wipes the line before other output is printed to the same terminal.
"""

from __future__ import annotations

import sys
import threading
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


class PhaseBar:
    """The step of a long command on one line of ``stream`` (stderr by default): ``phase``
    starts a step (``total`` items or None), ``advance`` counts one; redrawn every
    ``interval`` seconds once ``delay`` seconds have passed; ``close`` stops and wipes it."""

    def __init__(
        self,
        stream: TextIO | None = None,
        enabled: bool = True,
        delay: float = 0.5,
        interval: float = 0.2,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and _is_terminal(self.stream)
        self.label = ""
        self.total: int | None = None
        self.done = 0
        self._start = self._phase_start = time.monotonic()
        self._delay = delay
        self._interval = interval
        self._shown = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def phase(self, label: str, total: int | None = None) -> None:
        with self._lock:
            self.label, self.total, self.done = label, total, 0
            self._phase_start = time.monotonic()

    def advance(self) -> None:
        with self._lock:
            self.done += 1

    def text(self) -> str:
        """The line as drawn now."""
        count = "" if self.total is None else f" {self.done}/{self.total}"
        seconds = time.monotonic() - self._phase_start
        return f"{self.label}{count} ({seconds:.0f} s)"

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            if time.monotonic() - self._start < self._delay or not self.label:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                self.stream.write(f"\r\x1b[K{self.text()}")
                self.stream.flush()
                self._shown = True

    def clear(self) -> None:
        """Erase the line (if drawn) so that the next output starts on a clean line."""
        with self._lock:
            if self._shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._shown = False

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.clear()
        self.enabled = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
