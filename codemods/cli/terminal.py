"""Colour on a terminal only.

Colour is used when the stream is a terminal and ``NO_COLOR`` is unset or empty
(https://no-color.org); never when output goes to a file, a pipe or a CI log.

before: ``+    if args.capture_layers:`` written as plain text everywhere.
after:  the same text, with added lines green, removed lines red, hunk headers cyan and file
        headers bold, when (and only when) a person is watching a terminal.
"""

from __future__ import annotations

import os
from typing import IO

import click


def colour_enabled(stream: IO | None) -> bool:
    """Whether to colour output written to ``stream``."""
    if os.environ.get("NO_COLOR"):
        return False
    if stream is None:
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # a closed or detached stream
        return False


def colour_diff(diff: str) -> str:
    """ANSI-coloured unified diff; the text itself is unchanged (only ``\n`` ends a line:
    a ``\r`` or form feed inside a line stays part of it)."""
    return "\n".join(_coloured_line(body) for body in diff.split("\n"))


def _coloured_line(body: str) -> str:
    if body.startswith(("+++", "---")):
        return click.style(body, bold=True)
    if body.startswith("@@"):
        return click.style(body, fg="cyan")
    if body.startswith("+"):
        return click.style(body, fg="green")
    if body.startswith("-"):
        return click.style(body, fg="red")
    return body


def error_label(text: str, coloured: bool) -> str:
    """``auxcap: error:`` in bold red when colouring."""
    return click.style(text, fg="red", bold=True) if coloured else text
