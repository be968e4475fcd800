"""Nullness: whether the ids passed to a hook may be None at the call."""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from codemods.callers.analyse.scopes import AnalyzerBase, _Scope
from codemods.callers.analyse.syntax import (
    _CONFIG_NAME,
    _CONTAINER_CALLS,
    _IDS_KEYWORD,
    _MAX_DEPTH,
    _call_name,
    _dotted,
    _is_none,
    _positional,
    _string_value,
)
from codemods.callers.records import Shape


class NullnessMixin(AnalyzerBase):
    """Which argument carries the ids, and whether they may be None."""

    # -------------------------------------------------------------- ids risk
    def _ids_arg(self, call: cst.Call, shape: Shape) -> cst.Arg | None:
        positional = _positional(call)
        skip = 1 if shape is Shape.UNBOUND else 0
        if len(positional) > skip:
            return positional[skip]
        for arg in call.args:
            if arg.keyword is not None and _IDS_KEYWORD.search(arg.keyword.value):
                return arg
        for arg in call.args:
            if arg.star:
                return arg
        return None

    def _annotation_optional(self, annotation: cst.BaseExpression) -> bool:
        if _is_none(annotation):
            return True
        if isinstance(annotation, cst.BinaryOperation) and isinstance(
            annotation.operator, cst.BitOr
        ):
            return self._annotation_optional(annotation.left) or self._annotation_optional(
                annotation.right
            )
        if isinstance(annotation, cst.Subscript):
            head = _dotted(annotation.value)
            if head and head[-1] == "Optional":
                return True
            if head and head[-1] == "Union":
                return any(
                    isinstance(element.slice, cst.Index)
                    and self._annotation_optional(element.slice.value)
                    for element in annotation.slice
                )
        value = _string_value(annotation)
        if value is not None:
            return "Optional" in value or re.search(r"\bNone\b", value) is not None
        return False

    def _definitely_set(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope], depth: int
    ) -> bool:
        """True when ``expr`` is a value that is certainly not None (a literal, a fresh list)."""
        if isinstance(
            expr,
            (
                cst.List,
                cst.Tuple,
                cst.Set,
                cst.Dict,
                cst.ListComp,
                cst.SetComp,
                cst.DictComp,
                cst.GeneratorExp,
                cst.Integer,
                cst.SimpleString,
                cst.ConcatenatedString,
                cst.FormattedString,
            ),
        ):
            return True
        if isinstance(expr, cst.Call) and _call_name(expr) in {*_CONTAINER_CALLS, "range", "dict"}:
            return True
        if isinstance(expr, cst.Name) and depth < _MAX_DEPTH:
            scope = self._lookup(expr.value, scopes)
            if scope is None or expr.value in scope.params or expr.value in scope.loops:
                return False
            values = scope.values.get(expr.value, [])
            return bool(values) and all(
                self._definitely_set(value, scopes, depth + 1) for value in values
            )
        return False

    def maybe_none(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope], depth: int = 0
    ) -> bool:
        """Whether ``expr`` may evaluate to None (a reasoned guess, erring towards yes)."""
        if depth > _MAX_DEPTH:
            return False
        if _is_none(expr):
            return True
        if isinstance(expr, cst.Name):
            scope = self._lookup(expr.value, scopes)
            if scope is None:
                return False
            param = scope.params.get(expr.value)
            if param is not None:
                if param.default is not None and _is_none(param.default):
                    return True
                if param.annotation is not None and self._annotation_optional(
                    param.annotation.annotation
                ):
                    return True
            annotation = scope.annotations.get(expr.value)
            if annotation is not None and self._annotation_optional(annotation):
                return True
            return any(
                self.maybe_none(value, scopes, depth + 1)
                for value in scope.values.get(expr.value, [])
            )
        if isinstance(expr, cst.Attribute):
            chain = _dotted(expr)
            if chain is None:
                return False
            if any(_CONFIG_NAME.search(part) for part in chain[:-1]):
                return True
            return len(chain) == 2 and self._attribute_maybe_none(chain, scopes, depth)
        if isinstance(expr, cst.BooleanOperation):
            if isinstance(expr.operator, cst.And):
                return True
            return self.maybe_none(expr.right, scopes, depth + 1) or not self._definitely_set(
                expr.right, scopes, depth + 1
            )
        if isinstance(expr, cst.IfExp):
            return self.maybe_none(expr.body, scopes, depth + 1) or self.maybe_none(
                expr.orelse, scopes, depth + 1
            )
        if isinstance(expr, cst.NamedExpr):
            return self.maybe_none(expr.value, scopes, depth + 1)
        if isinstance(expr, cst.Call):
            name = _call_name(expr)
            positional = _positional(expr)
            if name in _CONTAINER_CALLS and len(positional) == 1:
                return self.maybe_none(positional[0].value, scopes, depth + 1)
            if name == "getattr":
                return len(positional) < 3 or self.maybe_none(
                    positional[2].value, scopes, depth + 1
                )
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "get":
                return len(positional) < 2 or self.maybe_none(
                    positional[1].value, scopes, depth + 1
                )
        return False

    def _attribute_maybe_none(self, chain: list[str], scopes: Sequence[_Scope], depth: int) -> bool:
        """``self.x`` in a method: may ``x`` be None, judging by the class and its methods?"""
        method = scopes[0] if scopes else None
        if method is None or method.self_name != chain[0] or method.parent is None:
            return False
        owner, name = method.parent, chain[1]
        module_scope = self.scopes[self.module]
        annotation = owner.attribute_annotations.get(name) or owner.annotations.get(name)
        if annotation is not None and self._annotation_optional(annotation):
            return True
        if any(
            self.maybe_none(value, [owner, module_scope], depth + 1)
            for value in owner.values.get(name, [])
        ):
            return True
        return any(
            self.maybe_none(value, [scope, module_scope], depth + 1)
            for value, scope in owner.attributes.get(name, [])
        )
