"""Code blocks of the README, by section, for tests that run them as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(heading: str) -> list[str]:
    """The lines under the Markdown heading ``heading``, up to the next heading (a ``#`` line
    inside a code block is not a heading)."""
    lines = README.read_text().splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.fullmatch(rf"#+ {re.escape(heading)}", line)
    )
    section, fenced = [], False
    for line in lines[start + 1 :]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            break
        section.append(line)
    return section


def code_block(heading: str, language: str) -> str:
    """The first ```language block under the Markdown heading ``heading``."""
    text = "\n".join(_section(heading)) + "\n"
    return re.search(rf"```{language}\n(.*?)```", text, re.S).group(1)


def commands(heading: str) -> list[str]:
    """The shell commands of the first bash block under ``heading`` (comments dropped)."""
    lines = code_block(heading, "bash").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
