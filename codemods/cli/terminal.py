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
    """ANSI-coloured unified diff; the text itself is unchanged."""
    out = []
    for line in diff.splitlines(keepends=True):
        body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        if body.startswith(("+++", "---")):
            out.append(click.style(body, bold=True) + newline)
        elif body.startswith("@@"):
            out.append(click.style(body, fg="cyan") + newline)
        elif body.startswith("+"):
            out.append(click.style(body, fg="green") + newline)
        elif body.startswith("-"):
            out.append(click.style(body, fg="red") + newline)
        else:
            out.append(line)
    return "".join(out)


def error_label(text: str, coloured: bool) -> str:
    """``auxcap: error:`` in bold red when colouring."""
    return click.style(text, fg="red", bold=True) if coloured else text
