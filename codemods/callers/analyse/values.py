"""Value resolution: which hook names a callee, a getattr name, a dict lookup, a loop or a
stored setter can reach."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from codemods.callers.analyse.scopes import AnalyzerBase, _Scope
from codemods.callers.analyse.syntax import (
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
from codemods.callers.records import Shape

#: How deep the value resolution follows names, lookups and containers.
_VALUE_DEPTH = 12

_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


@dataclass(frozen=True)
class _Box:
    """A container an expression may hold: what iterating it yields (``items``) and, for a
    dict, what looking a key up yields (``values``)."""

    items: frozenset
    values: frozenset | None = None

    @property
    def looked_up(self) -> frozenset:
        return self.items if self.values is None else self.values


def _iterated(possible: frozenset) -> frozenset:
    """What iterating any of the ``possible`` values yields."""
    return frozenset().union(*(value.items for value in possible if isinstance(value, _Box)))


def _looked_up(possible: frozenset) -> frozenset:
    """What ``x[key]`` / ``x.get(key)`` yields for any of the ``possible`` values of ``x``."""
    return frozenset().union(*(value.looked_up for value in possible if isinstance(value, _Box)))


class ValuesMixin(AnalyzerBase):
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
        """The hook names a getattr name expression can evaluate to, and how it picks them:
        the shapes below, and every hook name among the strings the expression can hold."""
        by_shape = self._shaped_hook_names(expr, scopes, depth)
        if depth > 0:
            return by_shape
        resolved = self._resolved_names(expr, scopes)
        if by_shape is None or resolved is None:
            return by_shape or resolved
        return by_shape[0] | resolved[0], by_shape[1]

    def _shaped_hook_names(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope], depth: int = 0
    ) -> tuple[frozenset[str], Shape] | None:
        """The hook names of the shapes discovery knows by their form."""
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
            in_dict = self._dict_hook_names(expr.value, scopes, depth)
            return (in_dict, Shape.DICT_LOOKUP) if in_dict else None
        if (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "get"
        ):
            in_dict = self._dict_hook_names(expr.func.value, scopes, depth)
            return (in_dict, Shape.DICT_LOOKUP) if in_dict else None
        if isinstance(expr, cst.Name):
            scope = self._lookup(expr.value, scopes)
            if scope is None:
                return None
            found: set[str] = set()
            shape: Shape | None = None
            for iterable in scope.loops.get(expr.value, []):
                if isinstance(iterable, (cst.Tuple, cst.List, cst.Set)):
                    spelled = self._spelled_hooks(iterable)
                    if spelled:
                        found |= spelled
                        shape = Shape.LOOP
                elif isinstance(iterable, cst.Name):
                    listed = self._iterable_names(iterable, scopes, depth + 1)
                    if listed:
                        found |= listed
                        shape = Shape.LOOP
            for assigned in scope.values.get(expr.value, []):
                resolved = self._hook_names(assigned, scopes, depth + 1)
                if resolved:
                    found |= resolved[0]
                    shape = shape or resolved[1]
            return (frozenset(found), shape) if found and shape else None
        return None

    def _resolved_names(
        self, expr: cst.BaseExpression, scopes: Sequence[_Scope]
    ) -> tuple[frozenset[str], Shape] | None:
        """The hook names among every string ``expr`` can hold (:meth:`_possible`)."""
        names = frozenset(
            value
            for value in self._possible(expr, scopes, 0, {})
            if isinstance(value, str) and value in self.names
        )
        if not names:
            return None
        if isinstance(expr, cst.Subscript) or (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "get"
        ):
            return names, Shape.DICT_LOOKUP
        if isinstance(expr, cst.Name):
            scope = self._lookup(expr.value, scopes)
            if scope is None or expr.value in scope.loops:
                return names, Shape.LOOP
        return names, Shape.GETATTR

    # ------------------------------------------------------- value resolution
    def _possible(
        self,
        expr: cst.BaseExpression,
        scopes: Sequence[_Scope],
        depth: int,
        env: dict[str, frozenset],
    ) -> frozenset:
        """Every value ``expr`` can hold that matters for hook names: strings spelled out
        in one literal (see :func:`_spelled_name`) and containers of them (:class:`_Box`),
        through module, class and local names, tuples, lists, sets and dicts (nested),
        ``.get`` and subscripts, loops, comprehensions, ``a or b`` and conditional
        expressions.  Empty when nothing is known."""
        if depth > _VALUE_DEPTH:
            return frozenset()
        depth += 1
        spelled = _spelled_name(expr)
        if spelled is not None:
            return frozenset({spelled})
        if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
            items: set = set()
            for element in expr.elements:
                inner = self._possible(element.value, scopes, depth, env)
                items |= _iterated(inner) if isinstance(element, cst.StarredElement) else inner
            return frozenset({_Box(frozenset(items))})
        if isinstance(expr, cst.Dict):
            keys: set = set()
            values: set = set()
            for entry in expr.elements:
                if isinstance(entry, cst.DictElement):
                    keys |= self._possible(entry.key, scopes, depth, env)
                    values |= self._possible(entry.value, scopes, depth, env)
                else:  # ``**other``
                    for box in self._possible(entry.value, scopes, depth, env):
                        if isinstance(box, _Box):
                            keys |= box.items
                            values |= box.looked_up
            return frozenset({_Box(frozenset(keys), frozenset(values))})
        if isinstance(expr, cst.Name):
            return self._possible_name(expr, scopes, depth, env)
        if isinstance(expr, cst.Subscript):
            if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
                return _looked_up(self._possible(expr.value, scopes, depth, env))
            return frozenset()
        if isinstance(expr, cst.Attribute):
            return self._possible_attribute(expr, scopes, depth, env)
        if isinstance(expr, (cst.BooleanOperation,)):
            return self._possible(expr.left, scopes, depth, env) | self._possible(
                expr.right, scopes, depth, env
            )
        if isinstance(expr, cst.IfExp):
            return self._possible(expr.body, scopes, depth, env) | self._possible(
                expr.orelse, scopes, depth, env
            )
        if isinstance(expr, _COMPREHENSIONS):
            return self._possible_comprehension(expr, scopes, depth, env)
        if isinstance(expr, cst.Call):
            return self._possible_call(expr, scopes, depth, env)
        return frozenset()

    def _possible_call(
        self, call: cst.Call, scopes: Sequence[_Scope], depth: int, env: dict[str, frozenset]
    ) -> frozenset:
        args = [arg for arg in call.args if arg.keyword is None and not arg.star]
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "get" and 1 <= len(args) <= 2:
            found = _looked_up(self._possible(func.value, scopes, depth, env))
            if len(args) == 2:
                found |= self._possible(args[1].value, scopes, depth, env)
            return found
        name = _call_name(call)
        if name in {"list", "tuple", "set", "sorted", "frozenset", "reversed"} and len(args) == 1:
            items = _iterated(self._possible(args[0].value, scopes, depth, env))
            return frozenset({_Box(items)})
        if name == "dict" and len(args) == 1:
            return self._possible(args[0].value, scopes, depth, env)
        return frozenset()

    def _possible_name(
        self, expr: cst.Name, scopes: Sequence[_Scope], depth: int, env: dict[str, frozenset]
    ) -> frozenset:
        if expr.value in env:
            return env[expr.value]
        iterable = self._comprehension_iterable(expr)
        if iterable is not None:
            return _iterated(self._possible(iterable, scopes, depth, env))
        scope = self._lookup(expr.value, scopes)
        if scope is None:
            return frozenset()
        key = (id(scope), expr.value)
        active = self.__dict__.setdefault("_resolving", set())
        if key in active:  # ``x = x or y``: already being resolved further up
            return frozenset()
        # A name bound in an enclosing scope resolves in that scope and the ones around it.
        chain = list(scopes)
        chain = chain[next(i for i, item in enumerate(chain) if item is scope) :]
        found: set = set()
        active.add(key)
        try:
            for assigned in scope.values.get(expr.value, []):
                found |= self._possible(assigned, chain, depth, {})
            for iterable in scope.loops.get(expr.value, []):
                found |= _iterated(self._possible(iterable, chain, depth, {}))
        finally:
            active.discard(key)
        return frozenset(found)

    def _comprehension_iterable(self, name: cst.Name) -> cst.BaseExpression | None:
        """The iterable of the comprehension clause that binds ``name`` at its use."""
        child: cst.CSTNode = name
        node = self._parent(name)
        while node is not None and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            if isinstance(node, cst.CompFor) and child is not node.iter:
                if isinstance(node.target, cst.Name) and node.target.value == name.value:
                    return node.iter
            child, node = node, self._parent(node)
        return None

    def _possible_comprehension(
        self,
        expr: cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp,
        scopes: Sequence[_Scope],
        depth: int,
        env: dict[str, frozenset],
    ) -> frozenset:
        inner = dict(env)
        clause: cst.CompFor | None = expr.for_in
        while clause is not None:
            if not isinstance(clause.target, cst.Name):
                return frozenset()
            inner[clause.target.value] = _iterated(
                self._possible(clause.iter, scopes, depth, inner)
            )
            clause = clause.inner_for_in
        if isinstance(expr, cst.DictComp):
            keys = self._possible(expr.key, scopes, depth, inner)
            values = self._possible(expr.value, scopes, depth, inner)
            return frozenset({_Box(keys, values)})
        return frozenset({_Box(self._possible(expr.elt, scopes, depth, inner))})

    def _possible_attribute(
        self, expr: cst.Attribute, scopes: Sequence[_Scope], depth: int, env: dict[str, frozenset]
    ) -> frozenset:
        """``self.X`` / ``cls.X`` / ``ClassName.X``: a class constant, or what the class's
        methods assign to ``self.X``."""
        chain = _dotted(expr)
        if chain is None or len(chain) != 2:
            return frozenset()
        owner, attribute = chain
        class_scope = None
        method = scopes[0] if scopes else None
        if (
            method is not None
            and method.parent is not None
            and owner
            in {
                method.self_name,
                "cls",
            }
        ):
            class_scope = method.parent
        else:
            for node, scope in self.scopes.items():
                if isinstance(node, cst.ClassDef) and node.name.value == owner:
                    class_scope = scope
                    break
        if class_scope is None or not isinstance(class_scope.node, cst.ClassDef):
            return frozenset()
        module_scope = self.scopes[self.module]
        found: set = set()
        for assigned in class_scope.values.get(attribute, []):
            found |= self._possible(assigned, [class_scope, module_scope], depth, {})
        for assigned, scope in class_scope.attributes.get(attribute, []):
            found |= self._possible(assigned, [scope, module_scope], depth, {})
        return frozenset(found)

    def _iterable_names(
        self, expr: cst.Name, scopes: Sequence[_Scope], depth: int
    ) -> frozenset[str] | None:
        scope = self._lookup(expr.value, scopes)
        if scope is None or depth > _MAX_DEPTH:
            return None
        found = set()
        for assigned in scope.values.get(expr.value, []):
            if isinstance(assigned, (cst.Tuple, cst.List, cst.Set)):
                found |= self._spelled_hooks(assigned)
        return frozenset(found) or None

    def _spelled_hooks(self, container: cst.Tuple | cst.List | cst.Set) -> set[str]:
        """The hook names spelled out as elements of a literal tuple, list or set."""
        spelled = (_spelled_name(element.value) for element in container.elements)
        return {value for value in spelled if value in self.names}

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
    def _name_expr(self, call: cst.Call, scopes: Sequence[_Scope]) -> cst.BaseExpression | None:
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
        if len(positional) < 2:
            return None
        held = positional[1].value
        # ``name`` or ``TABLE[key]``: names bound once each, so they still hold at the call
        # what they held when the setter was fetched.
        parts = [held]
        if isinstance(held, cst.Subscript) and _is_simple_reference(held):
            index = held.slice[0].slice
            assert isinstance(index, cst.Index)
            parts = [held.value, index.value]
        for part in parts:
            if isinstance(part, (cst.SimpleString, cst.Integer)):
                continue
            if not isinstance(part, cst.Name):
                return None
            owner = self._lookup(part.value, scopes)
            if owner is None or (owner is not scope and owner.node is not self.module):
                return None
            bindings = (
                len(owner.values.get(part.value, []))
                + len(owner.loops.get(part.value, []))
                + (part.value in owner.params)
                + (part.value in owner.annotations and part.value not in owner.values)
            )
            if bindings != 1:
                return None
        return held.deep_clone()
