"""Value resolution: which hook names a callee, a getattr name, a dict lookup, a loop or a
stored setter can reach."""

from __future__ import annotations

import re
from collections.abc import Sequence

import libcst as cst

from codemods.discover.scopes import _Scope
from codemods.discover.syntax import (
    _HOOK_TAIL,
    _HOOK_TAIL_CHARS,
    _MAX_DEPTH,
    _call_name,
    _dotted,
    _is_mock_call_builder,
    _is_simple_reference,
    _positional,
    _spelled_name,
)
from codemods.records import Shape


class ValuesMixin:
    """Hook-name resolution of the analyzer."""

    # ------------------------------------------------------------ hook names
    def _dict_hook_names(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope], depth: int
    ) -> frozenset[str] | None:
        if isinstance(expr, cst.Dict):
            found = set()
            for element in expr.elements:
                if isinstance(element, cst.DictElement):
                    value = _spelled_name(element.value)
                    if value in self.names:
                        found.add(value)
            return frozenset(found) or None
        if isinstance(expr, cst.Name) and depth < _MAX_DEPTH:
            scope = self._lookup(expr.value, scopes)
            if scope is not None and len(scope.values.get(expr.value, [])) == 1:
                return self._dict_hook_names(scope.values[expr.value][0], scopes, depth + 1)
        return None

    def _hook_names(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope], depth: int = 0
    ) -> tuple[frozenset[str], Shape] | None:
        """The hook names a getattr name expression can evaluate to, and how it picks them."""
        if depth > _MAX_DEPTH:
            return None
        value = _spelled_name(expr)
        if value is not None:
            return (frozenset({value}), Shape.GETATTR) if value in self.names else None
        if isinstance(expr, cst.FormattedString):
            # f"set_{method}_layers_to_capture": every hook the pattern can spell.  The
            # name's tail must be written out, so f"{attr}" alone names no hook.
            tail = expr.parts[-1] if expr.parts else None
            if not (
                isinstance(tail, cst.FormattedStringText)
                and tail.value.endswith(_HOOK_TAIL)
                and _HOOK_TAIL_CHARS.fullmatch(tail.value)
            ):
                return None
            pattern = "".join(
                re.escape(part.value) if isinstance(part, cst.FormattedStringText) else ".+"
                for part in expr.parts
            )
            names = frozenset(name for name in self.names if re.fullmatch(pattern, name))
            return (names, Shape.GETATTR) if names else None
        if isinstance(expr, cst.Subscript):
            names = self._dict_hook_names(expr.value, scopes, depth)
            return (names, Shape.DICT_LOOKUP) if names else None
        if (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "get"
        ):
            names = self._dict_hook_names(expr.func.value, scopes, depth)
            return (names, Shape.DICT_LOOKUP) if names else None
        if isinstance(expr, cst.Name):
            scope = self._lookup(expr.value, scopes)
            if scope is None:
                return None
            found: set[str] = set()
            shape: Shape | None = None
            for iterable in scope.loops.get(expr.value, []):
                if isinstance(iterable, (cst.Tuple, cst.List, cst.Set)):
                    for element in iterable.elements:
                        value = _spelled_name(element.value)
                        if value in self.names:
                            found.add(value)
                            shape = Shape.LOOP
                elif isinstance(iterable, cst.Name):
                    names = self._iterable_names(iterable, scopes, depth + 1)
                    if names:
                        found |= names
                        shape = Shape.LOOP
            for assigned in scope.values.get(expr.value, []):
                resolved = self._hook_names(assigned, scopes, depth + 1)
                if resolved:
                    found |= resolved[0]
                    shape = shape or resolved[1]
            return (frozenset(found), shape) if found and shape else None
        return None

    def _iterable_names(
        self, expr: cst.Name, scopes: Sequence[_Scope], depth: int
    ) -> frozenset[str] | None:
        scope = self._lookup(expr.value, scopes)
        if scope is None or depth > _MAX_DEPTH:
            return None
        found = set()
        for assigned in scope.values.get(expr.value, []):
            if isinstance(assigned, (cst.Tuple, cst.List, cst.Set)):
                for element in assigned.elements:
                    value = _spelled_name(element.value)
                    if value in self.names:
                        found.add(value)
        return frozenset(found) or None

    def _getattr_names(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope]
    ) -> tuple[frozenset[str], Shape] | None:
        """``getattr(obj, <hook name expression>[, default])`` -> the names it may fetch."""
        if not isinstance(expr, cst.Call) or _call_name(expr) != "getattr":
            return None
        positional = _positional(expr)
        if len(positional) < 2:
            return None
        return self._hook_names(positional[1].value, scopes)

    def _resolve_callee(
        self, call: cst.Call, scopes: Sequence[_Scope]
    ) -> tuple[frozenset[str], Shape] | None:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in self.names:
            receiver = _dotted(func.value)
            if receiver is not None and _is_mock_call_builder(receiver):
                return None  # mock.call.set_x(...): an expected call in a mock assertion
            # ``KimiLinearForCausalLM.set_x(model, ids)`` / ``type(m).set_x(m, ids)``: the
            # hooks take one argument, so two positional ones mean an unbound call.
            unbound = len(_positional(call)) >= 2 or (
                receiver is not None and receiver[-1][:1].isupper() and not receiver[-1].isupper()
            )
            shape = Shape.UNBOUND if unbound else Shape.DIRECT
            return frozenset({func.attr.value}), shape
        fetched = self._getattr_names(func, scopes)
        if fetched is not None:
            return fetched
        found: set[str] = set()
        for assigned, assigned_scopes in self._stored_setters(func, scopes):
            if isinstance(assigned, cst.Attribute) and assigned.attr.value in self.names:
                found.add(assigned.attr.value)
                continue
            fetched = self._getattr_names(assigned, assigned_scopes)
            if fetched is not None:
                found |= fetched[0]
        return (frozenset(found), Shape.VARIABLE) if found else None

    def _stored_setters(
        self, func: cst.BaseExpression, scopes: Sequence[_Scope]
    ) -> list[tuple[cst.BaseExpression, Sequence[_Scope]]]:
        """What a called name (``setter``) or attribute (``self._setter``) was assigned."""
        if isinstance(func, cst.Name):
            scope = self._lookup(func.value, scopes)
            if scope is None:
                return []
            return [(value, scopes) for value in scope.values.get(func.value, [])]
        chain = _dotted(func)
        method = scopes[0] if scopes else None
        if (
            chain is None
            or len(chain) != 2
            or method is None
            or method.self_name != chain[0]
            or method.parent is None
        ):
            return []
        module_scope = self.scopes[self.module]
        return [
            (value, [scope, module_scope])
            for value, scope in method.parent.attributes.get(chain[1], [])
        ]


    # ------------------------------------------------------ name at the call
    def _name_expr(
        self, call: cst.Call, scopes: Sequence[_Scope]
    ) -> cst.BaseExpression | None:
        """The expression holding, at ``call``, the name of the hook it calls: the name
        argument of ``getattr(obj, name)(ids)``, or of ``setter = getattr(obj, name)`` when
        ``setter`` and ``name`` are each bound once in the call's own scope.  None when no
        such expression can be tested at the call."""
        func = call.func
        if isinstance(func, cst.Call) and _call_name(func) == "getattr":
            positional = _positional(func)
            if len(positional) >= 2 and _is_simple_reference(positional[1].value):
                return positional[1].value
            return None
        if not isinstance(func, cst.Name) or not scopes:
            return None
        scope = scopes[0]
        values = scope.values.get(func.value, [])
        if len(values) != 1 or func.value in scope.loops or func.value in scope.params:
            return None
        fetched = values[0]
        if not (isinstance(fetched, cst.Call) and _call_name(fetched) == "getattr"):
            return None
        positional = _positional(fetched)
        if len(positional) < 2 or not isinstance(positional[1].value, cst.Name):
            return None
        name = positional[1].value.value
        bindings = (
            len(scope.values.get(name, []))
            + len(scope.loops.get(name, []))
            + (name in scope.params)
        )
        if bindings != 1 or self._lookup(name, scopes) is not scope:
            return None
        return cst.Name(name)
