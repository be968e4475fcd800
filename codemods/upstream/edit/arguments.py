"""A parameter added to a function definition, a keyword argument added to a call, each
laid out as black would lay it out.

Before::

    def configure(*, model, layer_ids):
        ...

    configure(model=model, layer_ids=ids)

after ``with_parameter(fn, "pp_size: int = 1", "")`` and ``laid_out_anew(statement, call,
"pp_size", "self.pp_size", "")``::

    def configure(*, model, layer_ids, pp_size: int = 1):
        ...

    configure(model=model, layer_ids=ids, pp_size=self.pp_size)

A parameter list or argument list one per line with a magic trailing comma stays so
(``with_keyword`` for calls); any other is laid out anew.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.pyformat import INDENT, Call, parse_statements, render_call
from codemods.upstream.edit.walk import code_of, findall


def has_parameter(fn: cst.FunctionDef, name: str) -> bool:
    """Whether ``fn`` has a parameter called ``name`` (``*args``/``**kwargs`` included)."""
    params = fn.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    for extra in (params.star_arg, params.star_kwarg):
        if isinstance(extra, cst.Param):
            every.append(extra)
    return any(p.name.value == name for p in every)


def _exploded(whitespace: cst.BaseParenthesizableWhitespace) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)


def with_parameter(fn: cst.FunctionDef, definition: str, indent: str) -> cst.FunctionDef:
    """``fn`` with the parameter ``definition`` (``pp_size: int = 1``) last among its parameters (keyword-only where it
    has a ``*``; before ``**kwargs``), laid out as black would: a parameter list one per
    line with its magic trailing comma stays so, any other is laid out anew."""
    (parsed,) = parse_statements(f"def f({definition}):\n    pass\n", "")
    assert isinstance(parsed, cst.FunctionDef)
    new = parsed.params.params[0]
    params = fn.params
    keyword_only = not isinstance(params.star_arg, cst.MaybeSentinel)
    group = list(params.kwonly_params if keyword_only else params.params)
    before: list[cst.Param | cst.ParamStar] = [*params.posonly_params]
    if keyword_only:
        before += list(params.params)
        assert not isinstance(params.star_arg, cst.MaybeSentinel)
        before.append(params.star_arg)
    before += group
    after = [params.star_kwarg] if isinstance(params.star_kwarg, cst.Param) else []
    prev = before[-1] if before else None
    if (
        _exploded(fn.whitespace_before_params)
        and prev is not None
        and isinstance(prev.comma, cst.Comma)
    ):
        # One per line, trailing comma: the new line takes the previous one's comma.
        new = new.with_changes(comma=prev.comma)
        if not after:
            separator = cst.Comma(whitespace_after=fn.whitespace_before_params)
            prev = prev.with_changes(comma=separator)
        changes = _replace_param(params, before[-1], prev)
        if keyword_only:
            changes["kwonly_params"] = [*changes.get("kwonly_params", group), new]
        else:
            changes["params"] = [*changes.get("params", group), new]
        return fn.with_changes(params=params.with_changes(**changes))
    texts = [_param_text(p) for p in [*before, new, *after]]
    if params.posonly_params:
        at = len(params.posonly_params)
        texts.insert(at, "/")
    head = "async def " if fn.asynchronous is not None else "def "
    returns = f" -> {code_of(fn.returns.annotation)}" if fn.returns is not None else ""
    lines = render_call(indent, head, Call(fn.name.value, tuple(texts)), f"{returns}:")
    text = "".join(f"{line}\n" for line in lines) + f"{indent}{INDENT}pass\n"
    (laid_out,) = parse_statements(text, indent)
    assert isinstance(laid_out, cst.FunctionDef)
    return fn.with_changes(
        params=laid_out.params, whitespace_before_params=laid_out.whitespace_before_params
    )


def _replace_param(
    params: cst.Parameters, old: cst.Param | cst.ParamStar, new: cst.Param | cst.ParamStar
) -> dict:
    if old is new:
        return {}
    if isinstance(old, cst.ParamStar) or old is params.star_arg:
        return {"star_arg": new}
    for field in ("posonly_params", "params", "kwonly_params"):
        group = list(getattr(params, field))
        if any(p is old for p in group):
            return {field: [new if p is old else p for p in group]}
    raise AssertionError("the parameter is not in the list")


def _param_text(param: cst.Param | cst.ParamStar) -> str:
    if isinstance(param, cst.ParamStar):
        return "*"
    bare = param.with_changes(
        comma=cst.MaybeSentinel.DEFAULT, whitespace_after_param=cst.SimpleWhitespace("")
    )
    return code_of(bare)


def calls_of(node: cst.CSTNode, names: frozenset[str]) -> Iterator[cst.Call]:
    """Every call of a function named in ``names`` (``f(...)``, ``x.f(...)``), in order."""
    for call in findall(node, m.Call()):
        func = call.func
        name = func.value if isinstance(func, cst.Name) else None
        if isinstance(func, cst.Attribute):
            name = func.attr.value
        if name in names:
            yield call


def callee_of(call: cst.Call) -> str:
    return code_of(call.func).rsplit(".", 1)[-1]


def with_keyword(call: cst.Call, name: str, value: str) -> cst.Call | None:
    """``call`` with ``<name>=<value>`` last, where its arguments are one per line with a
    magic trailing comma (black keeps them so); None for any other layout."""
    args = list(call.args)
    if not args or not _exploded(call.whitespace_before_args):
        return None
    last = args[-1]
    if not isinstance(last.comma, cst.Comma):
        return None
    new = cst.Arg(
        cst.parse_expression(value),
        keyword=cst.Name(name),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        comma=last.comma,
    )
    separator = cst.Comma(whitespace_after=call.whitespace_before_args)
    return call.with_changes(args=[*args[:-1], last.with_changes(comma=separator), new])


def laid_out_anew(
    statement: cst.SimpleStatementLine, call: cst.Call, name: str, value: str, indent: str
) -> cst.SimpleStatementLine | None:
    """The statement ``call(...)`` or ``x = call(...)`` with ``<name>=<value>`` added,
    laid out as black would (``render_call``); None for any other statement."""
    if len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Expr) and small.value is call:
        prefix = ""
    elif isinstance(small, cst.Assign) and small.value is call:
        prefix = "".join(f"{code_of(t.target)} = " for t in small.targets)
    else:
        return None
    texts = [code_of(a.with_changes(comma=cst.MaybeSentinel.DEFAULT)).strip() for a in call.args]
    if any("\n" in t or "#" in t for t in texts):
        return None
    lines = render_call(indent, prefix, Call(code_of(call.func), (*texts, f"{name}={value}")))
    (laid_out,) = parse_statements("".join(f"{line}\n" for line in lines), indent)
    assert isinstance(laid_out, cst.SimpleStatementLine)
    return laid_out.with_changes(
        leading_lines=statement.leading_lines, trailing_whitespace=statement.trailing_whitespace
    )


class ReplaceNodes(cst.CSTTransformer):
    """Replaces nodes by identity."""

    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        self.replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self.replacements.get(id(original_node), updated_node)
