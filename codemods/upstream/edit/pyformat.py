"""Lay out generated statements the way black (line length 88) would, and turn the text
into LibCST nodes that render byte-for-byte as laid out at a given indentation.

Only the few shapes the upstream rewriters generate are covered: calls (nested calls as
arguments) and ``from x import (...)`` statements.  A :class:`Call` is rendered on one line
when it fits, else with its arguments on one indented line, else one argument per line with
a trailing comma (black's "magic trailing comma" keeps that stable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

LINE_LENGTH = 88
INDENT = "    "


@dataclass(frozen=True)
class Call:
    """``head(args...)`` where each argument is text or another :class:`Call`."""

    head: str
    args: tuple[str | Call, ...]

    def flat(self) -> str:
        return f"{self.head}({', '.join(_flat(a) for a in self.args)})"


Arg = str | Call


def _flat(arg: Arg) -> str:
    return arg.flat() if isinstance(arg, Call) else arg


def _fits(indent: str, text: str) -> bool:
    return len(indent) + len(text) <= LINE_LENGTH


def render_call(indent: str, prefix: str, call: Call, suffix: str = "") -> list[str]:
    """Lines (with indentation, no newlines) of ``prefix + call + suffix``."""
    one_line = prefix + call.flat() + suffix
    if _fits(indent, one_line):
        return [indent + one_line]
    inner = indent + INDENT
    opening = indent + prefix + call.head + "("
    closing = indent + ")" + suffix
    if len(call.args) == 1 and isinstance(call.args[0], Call):
        body = render_call(inner, "", call.args[0])
        return [opening, *body, closing]
    joined = ", ".join(_flat(a) for a in call.args)
    if _fits(inner, joined):
        return [opening, inner + joined, closing]
    lines = [opening]
    for arg in call.args:
        if isinstance(arg, Call):
            lines += render_call(inner, "", arg, ",")
        else:
            lines.append(inner + arg + ",")
    lines.append(closing)
    return lines


def render_from_import(module: str, names: Sequence[str]) -> str:
    """``from module import a, b`` (isort profile black), one line when it fits."""
    one_line = f"from {module} import {', '.join(names)}"
    if len(one_line) <= LINE_LENGTH:
        return one_line + "\n"
    body = "".join(f"{INDENT}{name},\n" for name in names)
    return f"from {module} import (\n{body})\n"


def parse_statements(text: str, indent: str, config: cst.PartialParserConfig | None = None):
    """Parse statements written at absolute indentation ``indent`` (every line of ``text``
    carries it) into nodes that render identically when placed in a block at that indent.

    LibCST keeps the whitespace inside brackets verbatim, so continuation lines must be
    written at their final indentation; nesting the text in dummy ``if`` blocks lets the
    parser accept it while block indentation is stored relative to the enclosing block.
    """
    depth, rest = divmod(len(indent), len(INDENT))
    if rest or indent != INDENT * depth:
        raise ValueError(f"indentation must be a multiple of 4 spaces: {indent!r}")
    wrapper = "".join(f"{INDENT * level}if True:\n" for level in range(depth))
    module = cst.parse_module(wrapper + text, config=config or cst.PartialParserConfig())
    body: Sequence[cst.BaseStatement] = module.body
    for _ in range(depth):
        (block,) = body
        assert isinstance(block, cst.If) and isinstance(block.body, cst.IndentedBlock)
        body = block.body.body
    return list(body)


def lines_to_text(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)
