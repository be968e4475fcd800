"""Code blocks of the README and of the reference pages in ``docs/``, by section, for tests
that run them as written.

A section is found by its heading text, in whichever page holds it: the README or one of
``docs/*.md``.  A heading must be on exactly one page, so a test never reads a stale copy.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The page holding the generated model tables (``scripts/model_table.py``).
MODELS_PAGE = DOCS / "models.md"


def pages() -> list[Path]:
    """The README, then every Markdown page of the reference site."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _heading_index(lines: list[str], heading: str) -> int | None:
    """The index of the Markdown heading ``heading`` in ``lines`` (a ``#`` line inside a
    code block is not a heading), or None."""
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.fullmatch(rf"#+ {re.escape(heading)}", line):
            return i
    return None


def page_with(heading: str) -> Path:
    """The one page (README or ``docs/*.md``) with the heading ``heading``."""
    found = [
        page
        for page in pages()
        if _heading_index(page.read_text(encoding="utf-8").splitlines(), heading) is not None
    ]
    assert len(found) == 1, f"heading {heading!r} is on {len(found)} pages: {found}"
    return found[0]


def _section(heading: str) -> list[str]:
    """The lines under the Markdown heading ``heading``, up to the next heading (a ``#`` line
    inside a code block is not a heading)."""
    lines = page_with(heading).read_text(encoding="utf-8").splitlines()
    start = _heading_index(lines, heading)
    assert start is not None
    section, fenced = [], False
    for line in lines[start + 1 :]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            break
        section.append(line)
    return section


def section_text(heading: str) -> str:
    """The text under the heading ``heading`` (see :func:`_section`)."""
    return "\n".join(_section(heading)) + "\n"


def code_block(heading: str, language: str) -> str:
    """The first ```language block under the Markdown heading ``heading``."""
    return re.search(rf"```{language}\n(.*?)```", section_text(heading), re.S).group(1)


def commands(heading: str) -> list[str]:
    """The shell commands of the first bash block under ``heading`` (comments dropped)."""
    lines = code_block(heading, "bash").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def code_blocks(text: str, language: str) -> list[str]:
    """Every ```language block of the Markdown ``text``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)
