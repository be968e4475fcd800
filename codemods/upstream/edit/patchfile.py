"""Write file changes as one git-style patch (``git apply`` / ``git am`` compatible).

A :class:`FileChange` says what one file should become: ``old`` is its current text (None for a
file the patch creates) and ``new`` the wanted text; its ``group`` and ``role``
(:mod:`codemods.upstream.edit.change_kinds`) say, from the part that made it, which patch of
the series it belongs to and what it does.  :func:`render_patch` turns a list of them
into the text of a patch with ``diff --git a/P b/P`` headers, ``new file mode 100644`` for
created files, ``index`` lines carrying git blob ids, and unified hunks with three lines of
context.  Changes whose old and new text are equal are left out, so a patch of nothing-to-do
is the empty string.

Line endings are kept as found; a last line without a newline gets git's
``\\ No newline at end of file`` marker.  Paths are POSIX and relative to the tree root.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from codemods.upstream.edit.change_kinds import Role

CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file\n"


@dataclass(frozen=True)
class FileChange:
    """``path`` (relative, POSIX) goes from ``old`` (None: does not exist) to ``new``;
    ``group``: the series group, ``role``: what the change does (``change_kinds``)."""

    path: str
    old: str | None
    new: str
    group: str
    role: Role

    @property
    def is_new_file(self) -> bool:
        return self.old is None

    @property
    def changed(self) -> bool:
        return self.old != self.new


def blob_id(text: str | None) -> str:
    """The git blob id of ``text`` (UTF-8), or the all-zero id for a missing file."""
    if text is None:
        return "0" * 40
    data = text.encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _hunk_range(start: int, count: int) -> str:
    # Unified-diff convention: an empty range names the line before it.
    if count == 0:
        return f"{start},0"
    if count == 1:
        return f"{start + 1}"
    return f"{start + 1},{count}"


def _emit(line: str, marker: str, out: list[str]) -> None:
    if line.endswith("\n"):
        out.append(marker + line)
    else:
        out.append(marker + line + "\n")
        out.append(NO_NEWLINE)


def unified_hunks(old_lines: Sequence[str], new_lines: Sequence[str]) -> list[str]:
    """Hunk lines (with ``@@`` headers) turning ``old_lines`` into ``new_lines``."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_hunk_range(i1, i2 - i1)} +{_hunk_range(j1, j2 - j1)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for line in old_lines[a1:a2]:
                    _emit(line, " ", out)
                continue
            for line in old_lines[a1:a2]:
                _emit(line, "-", out)
            for line in new_lines[b1:b2]:
                _emit(line, "+", out)
    return out


def render_change(change: FileChange) -> str:
    """One ``diff --git`` section, or "" when the file does not change."""
    if not change.changed:
        return ""
    path = change.path
    header = [f"diff --git a/{path} b/{path}\n"]
    old_id, new_id = blob_id(change.old)[:12], blob_id(change.new)[:12]
    if change.is_new_file:
        header.append("new file mode 100644\n")
        header.append(f"index {old_id}..{new_id}\n")
        header.append("--- /dev/null\n")
    else:
        header.append(f"index {old_id}..{new_id} 100644\n")
        header.append(f"--- a/{path}\n")
    header.append(f"+++ b/{path}\n")
    old_lines = (change.old or "").splitlines(keepends=True)
    new_lines = change.new.splitlines(keepends=True)
    return "".join(header + unified_hunks(old_lines, new_lines))


def render_patch(changes: Iterable[FileChange]) -> str:
    """The whole patch; "" when nothing changes."""
    return "".join(render_change(change) for change in changes)


def changed_paths(changes: Iterable[FileChange]) -> list[str]:
    return [change.path for change in changes if change.changed]
