"""The one unified-diff helper: what ``--diff``, the CodeTF report and the PR tooling print.

before: two versions of a file's bytes and the two names to show.
after:  a ``git apply``-able unified diff (text decoded as UTF-8, undecodable bytes replaced),
        with ``\\ No newline at end of file`` after a last line that has no line break.
"""

from __future__ import annotations

import difflib

NO_NEWLINE = "\\ No newline at end of file"


def lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def unified_diff(before: bytes, after: bytes, fromfile: str, tofile: str) -> str:
    diff = difflib.unified_diff(lines(before), lines(after), fromfile, tofile)
    return "".join(line if line.endswith("\n") else f"{line}\n{NO_NEWLINE}\n" for line in diff)
