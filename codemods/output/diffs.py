"""The one unified-diff helper: what ``--diff``, the CodeTF report and the PR tooling print.

before: two versions of a file's bytes and the two names to show.
after:  ``unified_diff_bytes``: a unified diff of the bytes themselves, for ``--diff``: lines
        end at ``\\n`` only (as for git and patch), so a latin-1 ``é``, a UTF-8 BOM and the
        ``\\r`` of CRLF line endings reach the diff exactly as they are in the file, and
        ``git apply`` / ``patch -p1`` apply it to the bytes it was made from;
        ``unified_diff``: the same diff as text (for JSON), each line decoded with the file's
        own encoding (its coding cookie or BOM, else UTF-8; undecodable bytes replaced).
        Both write ``\\ No newline at end of file`` after a last line without a line break.
"""

from __future__ import annotations

import codecs
import difflib
import io
import os
import tokenize
from collections.abc import Iterable, Iterator
from typing import AnyStr

NO_NEWLINE = "\\ No newline at end of file"


def lines(data: bytes) -> list[str]:
    """The lines of a file decoded as UTF-8 (undecodable bytes replaced), as
    ``str.splitlines`` cuts them: for line numbers in reports, not for diffs."""
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def byte_lines(data: bytes) -> list[bytes]:
    """``data`` cut after each ``\\n``, every byte kept (the last line may lack one)."""
    parts = data.split(b"\n")
    cut = [part + b"\n" for part in parts[:-1]]
    return cut + [parts[-1]] if parts[-1] else cut


def source_encoding(data: bytes) -> str:
    """The encoding Python reads ``data`` with (coding cookie, BOM, else UTF-8); a BOM is
    kept as a character (``utf-8``, not ``utf-8-sig``); an unknown cookie gives UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        name = codecs.lookup(encoding).name
    except (SyntaxError, LookupError):
        return "utf-8"
    return "utf-8" if name == "utf-8-sig" else name


def _marked(diff_lines: Iterable[AnyStr], newline: AnyStr, marker: AnyStr) -> Iterator[AnyStr]:
    for line in diff_lines:
        yield line if line.endswith(newline) else line + newline + marker + newline


def unified_diff_bytes(before: bytes, after: bytes, fromfile: str, tofile: str) -> bytes:
    """The change from ``before`` to ``after`` as a unified diff of their bytes."""
    diff = difflib.diff_bytes(
        difflib.unified_diff,
        byte_lines(before),
        byte_lines(after),
        os.fsencode(fromfile),
        os.fsencode(tofile),
    )
    return b"".join(_marked(diff, b"\n", NO_NEWLINE.encode()))


def unified_diff(before: bytes, after: bytes, fromfile: str, tofile: str) -> str:
    """The same diff as text, each side decoded with its own encoding."""

    def text(data: bytes) -> list[str]:
        encoding = source_encoding(data)
        return [line.decode(encoding, errors="replace") for line in byte_lines(data)]

    diff = difflib.unified_diff(text(before), text(after), fromfile, tofile)
    return "".join(_marked(diff, "\n", NO_NEWLINE))
