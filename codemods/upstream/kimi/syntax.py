"""Small LibCST helpers the Kimi-Linear and Kimi-K3 rewriters share: the text of a node, the
strings and attributes it mentions, a class's methods, a function's statements and names, a
fresh local name, the capture branch of a layer loop, the non-last-rank test."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall

_EMPTY = cst.Module([])


def code(node: cst.CSTNode) -> str:
    return _EMPTY.code_for_node(node)


def strings_in(node: cst.CSTNode) -> list[str]:
    out = []
    for found in findall(node, m.SimpleString()):
        assert isinstance(found, cst.SimpleString)
        value = found.evaluated_value
        out.append(value if isinstance(value, str) else value.decode("latin-1"))
    return out


def mentions_attr(node: cst.CSTNode, attr: str) -> bool:
    return bool(findall(node, m.Attribute(attr=m.Name(attr))))


def methods_of(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {stmt.name.value: stmt for stmt in cls.body.body if isinstance(stmt, cst.FunctionDef)}


def statements_of(func: cst.FunctionDef) -> Sequence[cst.BaseStatement]:
    assert isinstance(func.body, cst.IndentedBlock)
    return func.body.body


def raises(block: cst.BaseSuite, exc: str) -> bool:
    return bool(findall(block, m.Raise(exc=m.Call(func=m.Name(exc)) | m.Name(exc))))


def assign_target_attr(stmt: cst.CSTNode, attr: str) -> cst.Attribute | None:
    """``X.attr`` when ``stmt`` is ``X.attr = ...`` or ``X.attr: T = ...``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    targets: list[cst.BaseExpression] = []
    if isinstance(small, cst.Assign):
        targets = [t.target for t in small.targets]
    elif isinstance(small, cst.AnnAssign):
        targets = [small.target]
    for target in targets:
        if isinstance(target, cst.Attribute) and target.attr.value == attr:
            return target
    return None


def function_locals(func: cst.FunctionDef) -> set[str]:
    names = {p.name.value for p in func.params.params}
    for found in findall(func, m.Name()):
        assert isinstance(found, cst.Name)
        names.add(found.value)
    return names


def fresh(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    taken.add(candidate)
    return candidate


def capture_if(loop: cst.For, attr: str) -> tuple[cst.If, str] | None:
    """The ``if ...<attr>...:`` in the loop whose block starts with ``<list>.append(...)``,
    and that list's name."""
    assert isinstance(loop.body, cst.IndentedBlock)
    for stmt in loop.body.body:
        if not isinstance(stmt, cst.If) or not mentions_attr(stmt.test, attr):
            continue
        body = stmt.body
        if not isinstance(body, cst.IndentedBlock):
            continue
        line = body.body[0]
        appended = m.SimpleStatementLine(
            body=[
                m.Expr(
                    value=m.Call(
                        func=m.Attribute(value=m.Name(), attr=m.Name("append")), args=[m.Arg()]
                    )
                )
            ]
        )
        if m.matches(line, appended):
            return stmt, line.body[0].value.func.value.value  # type: ignore[attr-defined]
    return None


def is_not_last(test: cst.BaseExpression) -> bool:
    """``not <group>.is_last_rank``."""
    return m.matches(
        test,
        m.UnaryOperation(operator=m.Not(), expression=m.Attribute(attr=m.Name("is_last_rank"))),
    )
