"""Small facts about LibCST nodes that discovery asks again and again: names,
spelled strings, dotted chains, literal values; and the constants it matches against."""

from __future__ import annotations

import re

import libcst as cst

#: Keyword names that carry the layer ids (``layer_ids=`` is SGLang's spelling).
_IDS_KEYWORD = re.compile(r"(^|_)(ids|layers|layer_ids|layer_indices)$|^layers?_to_capture$")

#: Attribute chains read from parsed options or configs: their fields are often unset.
_CONFIG_NAME = re.compile(
    r"(^|_)(args|cfg|config|conf|opts|options|hparams|settings|flags|params)$", re.IGNORECASE
)

#: Calls whose result is a fresh container, never None (but pass None through as a TypeError).
_CONTAINER_CALLS = frozenset({"list", "tuple", "sorted"})

#: Exceptions whose handlers also catch NotImplementedError.
_HANDLES_NOT_IMPLEMENTED = frozenset(
    {"NotImplementedError", "RuntimeError", "Exception", "BaseException"}
)

#: ``call.set_x(...)`` / ``mock.call.model.set_x(...)`` build expected calls for assertions.
_MOCK_CALL_PREFIXES = (("call",), ("mock", "call"), ("unittest", "mock", "call"))

_SCOPE_NODES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_EXIT_STATEMENTS = (cst.Raise, cst.Return, cst.Continue, cst.Break)
#: Every hook name of the hook form ends with this; an f-string name must spell it out.
_HOOK_TAIL = "_layers_to_capture"
_HOOK_TAIL_CHARS = re.compile(r"[a-z0-9_]+")
_MAX_DEPTH = 6

#: Attribute names that read a capture back.
READ_ATTRIBUTES = frozenset({"hidden_states", "layers_to_capture"})
READ_SUFFIX = "aux_hidden_states"


def is_capture_read(node: cst.CSTNode) -> bool:
    """``x.hidden_states``, ``x.layers_to_capture``, ``x.aux_hidden_states`` or a name
    ending with ``aux_hidden_states`` (what the walk collects)."""
    if isinstance(node, cst.Attribute):
        name = node.attr.value
        if name in READ_ATTRIBUTES:
            return True
    elif isinstance(node, cst.Name):
        name = node.value
    else:
        return False
    # (``capture_aux_hidden_states`` is the switch, not a capture: read after the call only,
    # :mod:`codemods.callers.analyse.required`)
    return name.endswith(READ_SUFFIX) and name != "capture_aux_hidden_states"


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _key(node: cst.CSTNode) -> str:
    """Source text of an expression with all whitespace and outer parentheses removed."""
    if getattr(node, "lpar", None) and not isinstance(node, (cst.Tuple, cst.GeneratorExp)):
        node = node.with_changes(lpar=[], rpar=[])
    return re.sub(r"\s+", "", _code(node))


def _dotted(node: cst.BaseExpression) -> list[str] | None:
    """``a.b.c`` -> ``["a", "b", "c"]``; None for anything that is not a plain chain."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else [*head, node.attr.value]
    return None


def last_name(node: cst.CSTNode) -> str | None:
    """``name`` and ``a.b.name`` -> ``"name"``; None for any other node."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def _call_name(call: cst.Call) -> str | None:
    return call.func.value if isinstance(call.func, cst.Name) else None


def _string_value(node: cst.BaseExpression) -> str | None:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _spelled_name(node: cst.BaseExpression) -> str | None:
    """A string literal's value when it is spelled out verbatim in one literal of the source.

    Hook names are recognised only where their text is written out, never when assembled from
    escapes (``"set_x\\x5f..."``) or from implicitly concatenated pieces: that keeps a text
    search for the names a safe prefilter for discovery (see :mod:`codemods.sources.prefilter`).
    """
    value = _string_value(node)
    if value is None:
        return None
    pieces = [node]
    while pieces:
        piece = pieces.pop()
        if isinstance(piece, cst.ConcatenatedString):
            pieces.extend((piece.left, piece.right))
        elif isinstance(piece, cst.SimpleString) and value in piece.value:
            return value
    return None


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [arg for arg in call.args if arg.keyword is None and not arg.star]


def _unwrap_container(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``list(x)`` -> ``x``: the value whose unset-ness matters."""
    while (
        isinstance(expr, cst.Call)
        and _call_name(expr) in _CONTAINER_CALLS
        and len(expr.args) == 1
        and expr.args[0].keyword is None
        and not expr.args[0].star
    ):
        expr = expr.args[0].value
    return expr


def _is_mock_call_builder(receiver: list[str]) -> bool:
    return any(tuple(receiver[: len(prefix)]) == prefix for prefix in _MOCK_CALL_PREFIXES)


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _is_simple_reference(expr: cst.BaseExpression) -> bool:
    """Names, attribute chains and constant subscripts: safe to evaluate twice."""
    if isinstance(expr, cst.Name):
        return expr.value not in {"None", "True", "False"}
    if isinstance(expr, cst.Attribute):
        return _is_simple_reference(expr.value)
    if isinstance(expr, cst.Subscript):
        if not _is_simple_reference(expr.value) or len(expr.slice) != 1:
            return False
        index = expr.slice[0].slice
        return isinstance(index, cst.Index) and isinstance(
            index.value, (cst.SimpleString, cst.Integer, cst.Name)
        )
    return False


def _is_constant(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.Name):
        return expr.value in {"None", "True", "False"}
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, (cst.List, cst.Tuple)):
        return all(
            isinstance(element, cst.Element) and _is_constant(element.value)
            for element in expr.elements
        )
    return False


def _is_repeatable(expr: cst.BaseExpression) -> bool:
    """Safe to evaluate twice (the guard's test, then the argument): references, constants,
    and ``or`` / ``and`` / conditional expressions made of them (``args.ids or None``)."""
    if _is_simple_reference(expr) or _is_constant(expr):
        return True
    if isinstance(expr, cst.BooleanOperation):
        return _is_repeatable(expr.left) and _is_repeatable(expr.right)
    if isinstance(expr, cst.IfExp):
        return all(_is_repeatable(part) for part in (expr.test, expr.body, expr.orelse))
    return False
