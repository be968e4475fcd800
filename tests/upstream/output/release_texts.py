"""Checks of the upstream texts against the release they were made for, read from the
release's own text (not from the generator's analysis): what a message quotes occurs in the
release, every file it names is a file of the patch, and the count of hooks that return early
off the last rank is the count a plain reading of the hooks gives."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from codemods.upstream.output.result_facts import validation_change

#: A capture hook's definition, up to the next definition at the same or a lower indent.
_HOOK = re.compile(
    r"^(?P<indent>[ \t]*)def set_\w+_layers_to_capture\(.*?(?=^(?P=indent)?(?:def |class |@)|\Z)",
    re.M | re.S,
)
#: ``if not self.pp_group.is_last_rank: return`` in one of its spellings.
_EARLY = re.compile(r"if\s+not\s+[\w.()]*is_last_rank\s*:\s*(?:#[^\n]*)?\n?\s*return\b")
#: A string quoted in a message: ``"..."`` with at least one space (a phrase, not a name).
_QUOTED = re.compile(r'"([^"\n]* [^"\n]*)"')


@cache
def release_text(root: Path) -> str:
    """Every Python file of the release tree at ``root``, joined, with string literals that
    Python concatenates (``"a "`` newline ``"b"``) joined as Python joins them."""
    text = "\n".join(
        path.read_text(encoding="utf-8", errors="replace") for path in sorted(root.rglob("*.py"))
    )
    return re.sub(r'"[ \t]*\n\s*f?"', "", text)


def early_return_by_text(result) -> set[str]:
    """The patched model files whose capture hooks return early off the last rank, read from
    each file's release text with a pattern."""
    files = set()
    for change in result.changes:
        name = change.path.rsplit("/", 1)[-1]
        if result.family is None or name not in result.family.patched or change.old is None:
            continue
        if any(_EARLY.search(match.group(0)) for match in _HOOK.finditer(change.old)):
            files.add(name)
    return files


def quoted(text: str) -> list[str]:
    return _QUOTED.findall(text)


def assert_quotes_in_release(result, text: str) -> None:
    """Every quoted phrase of ``text`` occurs in the release tree."""
    source = release_text(result.tree.root / result.tree.package.split("/")[0])
    for phrase in quoted(text):
        assert phrase in source, phrase


def check_branch_message(result, message: str) -> None:
    """The ``--branch`` commit message of ``result``: at most 72 columns, quotes only what
    the release has, names exactly the changed files, the validation change and the count of
    early-returning hooks a reading of the release gives."""
    lines = message.splitlines()
    assert all(len(line) <= 72 for line in lines), [line for line in lines if len(line) > 72]
    assert lines[1] == "", lines[:2]
    assert_quotes_in_release(result, message)
    changed = [c.path for c in result.changes if c.changed]
    named = re.findall(r"^  [AM] (\S+)$", message, flags=re.M)
    resolved = {
        next((path for path in changed if path.endswith("/" + short) or path == short), short)
        for short in named
    }
    assert resolved == set(changed), set(changed) ^ resolved
    assert len(named) == len(changed)
    # A package tree's patch leaves its tests out; the message names them as left out.
    left_out = set(result.tests) if result.tests_left_out else set()
    for token in re.findall(r"[\w/]+\.py", message):
        assert any(path.endswith(token) for path in changed) or token in left_out, token
    assert not re.search(r"^changed:$", message, flags=re.M | re.I)
    early = early_return_by_text(result)
    flat = " ".join(lines)
    if early and len(early) == len(result.family.patched):
        assert f"{len(early)} model files now capture" in flat
        assert "Their capture hooks returned early" in flat
    elif early:
        assert f"In {len(early)} of them the capture hooks returned early" in flat
    change = validation_change(result)
    if change is not None:
        short = change.path.split("/srt/", 1)[-1]
        assert f"Validation ({short})" in message
