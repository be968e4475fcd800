"""Guards and contexts: whether a call is behind a check of its ids, and whether it sits
inside a ``try`` that handles ``NotImplementedError``."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from codemods.callers.analyse.scopes import AnalyzerBase
from codemods.callers.analyse.syntax import (
    _EXIT_STATEMENTS,
    _HANDLES_NOT_IMPLEMENTED,
    _SCOPE_NODES,
    _call_name,
    _dotted,
    _is_none,
    _key,
    _positional,
    _string_value,
)

#: The expression holding a call's hook name (as ``_key`` spells it) and the hook names that
#: accept ``None``.
NameTest = tuple[str, frozenset[str]]


def _compares_to_none(left: cst.BaseExpression, right: cst.BaseExpression, key: str) -> bool:
    """``ids <op> None`` or ``None <op> ids`` (the operator is the caller's to check)."""
    return (_key(left) == key and _is_none(right)) or (_key(right) == key and _is_none(left))


class ContextsMixin(AnalyzerBase):
    """Guards and handlers around a call."""

    # ---------------------------------------------------------------- guards
    @staticmethod
    def _tests_name(test: cst.BaseExpression, name_key: NameTest | None, negated: bool) -> bool:
        """``name == "..."`` / ``name in (...)`` (``!=`` / ``not in`` when ``negated``) where
        ``name`` holds the hook name and every name compared accepts ``None``: the guard's
        test that lets ``None`` through to such a hook."""
        if name_key is None or not isinstance(test, cst.Comparison):
            return False
        key, lenient = name_key
        if len(test.comparisons) != 1 or _key(test.left) != key:
            return False
        comparison = test.comparisons[0]
        kinds = (cst.NotEqual, cst.NotIn) if negated else (cst.Equal, cst.In)
        if not isinstance(comparison.operator, kinds):
            return False
        compared = comparison.comparator
        if isinstance(comparison.operator, (cst.In, cst.NotIn)):
            if not isinstance(compared, (cst.Tuple, cst.List, cst.Set)) or not compared.elements:
                return False
            values = [_string_value(element.value) for element in compared.elements]
        else:
            values = [_string_value(compared)]
        return all(value is not None and value in lenient for value in values)

    def _asserts_present(
        self, test: cst.BaseExpression, key: str, name_key: NameTest | None = None
    ) -> bool:
        """True when ``test`` being true implies the ids (``key``) are set, or (with
        ``name_key``) that the hook called accepts ``None``."""
        if _key(test) == key:
            return True
        if self._tests_name(test, name_key, negated=False):
            return True
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
            if name_key is not None:
                return self._asserts_present(test.left, key, name_key) and self._asserts_present(
                    test.right, key, name_key
                )
        if isinstance(test, cst.NamedExpr):
            return _key(test.target) == key or self._asserts_present(test.value, key, name_key)
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._asserts_present(test.left, key, name_key) or self._asserts_present(
                test.right, key, name_key
            )
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._asserts_absent(test.expression, key, name_key)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            left, right = test.left, comparison.comparator
            if isinstance(comparison.operator, (cst.IsNot, cst.NotEqual)):
                return _compares_to_none(left, right, key)
            return self._is_len_of(left, key)
        if isinstance(test, cst.Call):
            name = _call_name(test)
            positional = _positional(test)
            if name in {"bool", "len", "isinstance"} and positional:
                return _key(positional[0].value) == key
        return False

    def _is_len_of(self, expr: cst.BaseExpression, key: str) -> bool:
        return (
            isinstance(expr, cst.Call)
            and _call_name(expr) == "len"
            and len(expr.args) == 1
            and _key(expr.args[0].value) == key
        )

    def _asserts_absent(
        self, test: cst.BaseExpression, key: str, name_key: NameTest | None = None
    ) -> bool:
        """True when ``test`` being false implies the ids (``key``) are set, or (with
        ``name_key``) that the hook called accepts ``None``."""
        if self._tests_name(test, name_key, negated=True):
            return True
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._asserts_present(test.expression, key, name_key)
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
            return self._asserts_absent(test.left, key, name_key) or self._asserts_absent(
                test.right, key, name_key
            )
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            if name_key is not None:
                return self._asserts_absent(test.left, key, name_key) and self._asserts_absent(
                    test.right, key, name_key
                )
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            left, right = test.left, comparison.comparator
            if isinstance(comparison.operator, (cst.Is, cst.Equal)):
                if _compares_to_none(left, right, key):
                    return True
                return self._is_len_of(left, key) and _key(right) == "0"
        return False

    @staticmethod
    def _exits(body: cst.BaseSuite) -> bool:
        statements = body.body
        if not statements:
            return False
        last = statements[-1]
        if isinstance(last, cst.SimpleStatementLine):
            return isinstance(last.body[-1], _EXIT_STATEMENTS)
        if isinstance(body, cst.SimpleStatementSuite):
            return isinstance(statements[-1], _EXIT_STATEMENTS)
        return False

    def _earlier_statements_guard(
        self,
        statements: Sequence[cst.CSTNode],
        current: cst.CSTNode,
        key: str,
        name_key: NameTest | None = None,
    ) -> bool:
        for statement in statements:
            if statement is current:
                return False
            if isinstance(statement, cst.If) and statement.orelse is None:
                if self._exits(statement.body) and self._asserts_absent(
                    statement.test, key, name_key
                ):
                    return True
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assert) and self._asserts_present(small.test, key):
                        return True
        return False

    def _is_guarded(self, call: cst.Call, key: str, name_key: NameTest | None = None) -> bool:
        """Whether ``call`` runs only when the ids (``key``) are set, or (with ``name_key``,
        the expression holding the hook name) when the hook called accepts ``None``."""
        child: cst.CSTNode = call
        node = self._parent(call)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, (cst.If, cst.IfExp)):
                if child is node.body and self._asserts_present(node.test, key, name_key):
                    return True
                if child is node.orelse and self._asserts_absent(node.test, key, name_key):
                    return True
            elif isinstance(node, cst.While):
                if child is node.body and self._asserts_present(node.test, key, name_key):
                    return True
            elif isinstance(node, cst.BooleanOperation):
                if child is node.right and isinstance(node.operator, cst.And):
                    if self._asserts_present(node.left, key, name_key):
                        return True
            elif isinstance(node, (cst.IndentedBlock, cst.Module)):
                if self._earlier_statements_guard(node.body, child, key, name_key):
                    return True
            child, node = node, self._parent(node)
        return False

    def _handles_not_implemented(self, call: cst.Call) -> bool:
        child: cst.CSTNode = call
        node = self._parent(call)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, cst.Try) and child is node.body:
                if any(self._handler_catches(handler.type) for handler in node.handlers):
                    return True
            child, node = node, self._parent(node)
        return False

    @staticmethod
    def _handler_catches(kind: cst.BaseExpression | None) -> bool:
        if kind is None:
            return True
        if isinstance(kind, cst.Tuple):
            return any(ContextsMixin._handler_catches(element.value) for element in kind.elements)
        chain = _dotted(kind)
        return chain is not None and chain[-1] in _HANDLES_NOT_IMPLEMENTED
