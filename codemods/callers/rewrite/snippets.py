"""Source-text helpers shared by the codemods: quoting and wrapping string literals."""

from __future__ import annotations

import libcst as cst


def quoted(text: str) -> str:
    """``text`` as a double-quoted Python string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrapped_literals(text: str, room: int) -> list[str]:
    """``text`` as one or more adjacent string literals, each at most ``room`` wide if possible.

    Splits after spaces, so the pieces concatenate back to ``text`` exactly.
    """
    pieces: list[str] = []
    current = ""
    words = text.split(" ")
    for index, word in enumerate(words):
        candidate = f"{current} {word}" if current else word
        # A piece that another follows ends with the space between them.
        spaced = candidate if index == len(words) - 1 else candidate + " "
        if current and len(quoted(spaced)) > room:
            pieces.append(current + " ")
            current = word
        else:
            current = candidate
    pieces.append(current)
    return [quoted(piece) for piece in pieces]


def fit_call_statement(
    line: cst.SimpleStatementLine, column: int, indent: str, limit: int
) -> cst.SimpleStatementLine:
    """Break a one-line call statement after ``(`` when it would end past ``limit`` (the
    host project's line length), as black does.

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
    if not call.args or code.count("\n") > 1 or column + len(code.rstrip()) <= limit:
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


def fit_test(test: cst.BaseExpression, column: int, indent: str, limit: int) -> cst.BaseExpression:
    """An ``if`` test laid out as black does when ``if <test>:`` would end past ``limit``:
    inside parentheses on a line of its own, or one operand of ``or`` / ``and`` per line."""
    code = cst.Module(body=[]).code_for_node(test)
    if column + len(f"if {code}:") <= limit or "\n" in code:
        return test
    first = cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        empty_lines=[],
        indent=True,
        last_line=cst.SimpleWhitespace(indent),
    )
    last = cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        empty_lines=[],
        indent=True,
        last_line=cst.SimpleWhitespace(""),
    )
    wrapped = test
    if column + len(indent) + len(code) > limit and isinstance(test, cst.BooleanOperation):
        operator = test.operator.with_changes(
            whitespace_before=cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(),
                empty_lines=[],
                indent=True,
                last_line=cst.SimpleWhitespace(indent),
            )
        )
        wrapped = test.with_changes(operator=operator)
    return wrapped.with_changes(
        lpar=[cst.LeftParen(whitespace_after=first)],
        rpar=[cst.RightParen(whitespace_before=last)],
    )
