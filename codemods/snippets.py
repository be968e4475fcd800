"""Source-text helpers shared by the codemods: quoting and wrapping string literals."""

from __future__ import annotations

import libcst as cst

#: Longest line the codemods aim for when they generate code (auxcap's own style).
MAX_LINE = 100


def quoted(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrapped_literals(text: str, room: int) -> list[str]:
    """``text`` as one or more adjacent string literals, each at most ``room`` wide if possible.

    Splits after spaces, so the pieces concatenate back to ``text`` exactly.
    """
    pieces: list[str] = []
    current = ""
    for word in text.split(" "):
        candidate = f"{current} {word}" if current else word
        if current and len(quoted(candidate + " ")) > room:
            pieces.append(current + " ")
            current = word
        else:
            current = candidate
    pieces.append(current)
    return [quoted(piece) for piece in pieces]


def fit_call_statement(
    line: cst.SimpleStatementLine, column: int, indent: str
) -> cst.SimpleStatementLine:
    """Break a one-line call statement after ``(`` when it would end past :data:`MAX_LINE`.

    ``column`` is where the statement starts once rewritten; ``indent`` is the module's
    indentation unit.  Calls already spread over lines are returned unchanged::

        self.model_runner.model.set_dspark_layers_to_capture(list(self.server_args.layers))
        # becomes
        self.model_runner.model.set_dspark_layers_to_capture(
            list(self.server_args.layers)
        )
    """
    statement = line.body[0]
    if not isinstance(statement, cst.Expr) or not isinstance(statement.value, cst.Call):
        return line
    call = statement.value
    code = cst.Module(body=[]).code_for_node(line.with_changes(leading_lines=()))
    if not call.args or code.count("\n") > 1 or column + len(code.rstrip()) <= MAX_LINE:
        return line
    args = list(call.args)
    args[-1] = args[-1].with_changes(
        whitespace_after_arg=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(),
            empty_lines=[],
            indent=True,
            last_line=cst.SimpleWhitespace(""),
        )
    )
    exploded = call.with_changes(
        args=args,
        whitespace_before_args=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(),
            empty_lines=[],
            indent=True,
            last_line=cst.SimpleWhitespace(indent),
        ),
    )
    return line.with_changes(body=[statement.with_changes(value=exploded)])


def suite_as_line(suite: cst.SimpleStatementSuite) -> cst.SimpleStatementLine:
    """The one statement of ``if ok: call()`` as a line of its own (comment kept)."""
    (statement,) = suite.body
    return cst.SimpleStatementLine(
        body=[statement.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
        trailing_whitespace=suite.trailing_whitespace,
    )
