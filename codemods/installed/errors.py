"""The errors of ``codemods.installed``; ``str()`` names the file or directory and the reason.

``InstalledError`` (exit 2 in the CLI: the input could not be used) and ``Refused`` (exit 1:
a check failed and nothing was written, or what was written was rolled back)."""

from __future__ import annotations


class InstalledError(Exception):
    """The interpreter, its sglang or its release cannot be used; nothing was written."""


class Refused(Exception):
    """A check failed: every byte is as it was before the command."""
