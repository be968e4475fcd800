"""Black-style (line length 88) text for the few statements the family patch inserts.

SGLang is formatted with black, so inserted code must look like black wrote it.  The
inserted statements are simple: a call, optionally assigned or returned, whose arguments
are names or one nested call.  ``render_call`` splits them the way black does: on one
line when it fits, else the arguments on one indented line, else one argument per line
with a trailing comma.
"""

from __future__ import annotations

from dataclasses import dataclass

SGLANG_LINE_LENGTH = 88


@dataclass(frozen=True)
class Call:
    """``func(arg, ...)``; each argument is source text or a nested ``Call``."""

    func: str
    args: tuple["str | Call", ...]

    def flat(self) -> str:
        return f"{self.func}({', '.join(_flat(arg) for arg in self.args)})"


def _flat(arg: "str | Call") -> str:
    return arg.flat() if isinstance(arg, Call) else arg


def render_call(call: Call, indent: int, prefix: str = "", suffix: str = "") -> str:
    """Lines (joined, no final newline) for ``prefix + call + suffix`` at ``indent``."""
    pad = " " * indent
    one_line = f"{pad}{prefix}{call.flat()}{suffix}"
    if len(one_line) <= SGLANG_LINE_LENGTH:
        return one_line
    inner_pad = " " * (indent + 4)
    joined = ", ".join(_flat(arg) for arg in call.args)
    if len(inner_pad) + len(joined) <= SGLANG_LINE_LENGTH:
        return f"{pad}{prefix}{call.func}(\n{inner_pad}{joined}\n{pad}){suffix}"
    if len(call.args) == 1 and isinstance(call.args[0], Call):
        inner = render_call(call.args[0], indent + 4)
        return f"{pad}{prefix}{call.func}(\n{inner}\n{pad}){suffix}"
    lines = [f"{pad}{prefix}{call.func}("]
    for arg in call.args:
        if isinstance(arg, Call):
            lines.append(render_call(arg, indent + 4, suffix=","))
        else:
            lines.append(f"{inner_pad}{arg},")
    lines.append(f"{pad}){suffix}")
    return "\n".join(lines)


def render_import(module: str, names: list[str]) -> str:
    """``from module import a, b`` in isort's black profile (wrapped one per line)."""
    names = sorted(dict.fromkeys(names), key=str.lower)
    one_line = f"from {module} import {', '.join(names)}"
    if len(one_line) <= SGLANG_LINE_LENGTH:
        return one_line
    body = "".join(f"    {name},\n" for name in names)
    return f"from {module} import (\n{body})"
