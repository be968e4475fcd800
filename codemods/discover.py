"""Find the call sites of capture hooks in one parsed module, and classify each.

The node-level entry point is :func:`find_calls`: given a :class:`libcst.MetadataWrapper`
it returns one :class:`FoundCall` per hook call (the ``libcst.Call`` node, its statement
when the call is a statement of its own, and the :class:`~codemods.records.CallSite`
record).  The codemods reuse it, so what ``scan`` reports is exactly what ``migrate``
rewrites.

Shapes found (``records.Shape``)::

    model.set_dspark_layers_to_capture(ids)                    # DIRECT, any receiver chain
    KimiLinearForCausalLM.set_dspark_layers_to_capture(m, ids)  # UNBOUND
    getattr(model, "set_dspark_layers_to_capture")(ids)         # GETATTR
    setter = getattr(model, "set_dspark_...", None); setter(ids)  # VARIABLE
    getattr(model, {"dspark": "set_dspark_..."}.get(method))(ids)  # DICT_LOOKUP (or [method])
    for name in ("set_eagle3_...", "set_dspark_..."): getattr(model, name)(ids)  # LOOP

Risk, per call: the ids *may be None* when they are a parameter defaulting to None or
annotated ``Optional[...]``/``X | None``, an ``args.x``/``cfg.x``/``self.config.x`` field, a
name (or ``self.x``) assigned from None, ``a or b``, ``d.get(k)`` or ``getattr(o, n, None)``,
or literal ``None``; literal lists/tuples and fresh ``list(...)`` values are safe.  A call is
*guarded* behind ``if ids:``, ``if ids is not None``, an ``and`` including such a check, its
``else`` after ``if ids is None``, or after ``if not ids: raise|return|continue|break`` /
``assert ids``.  Hooks that accept None (EAGLE3) are never guarded; a call may raise
``NotImplementedError`` under PP when it can reach a hook that the release facts show raising
it (:mod:`codemods.pp_raise`: DSPARK, DFLASH, user-added hooks; never EAGLE3), unless the call
is inside a ``try`` that handles it.

Never reported: hook definitions, a hook that delegates to the same hook on another object
(or to another hook: calls inside a hook's own definition must keep raising on ``None``),
hook names in strings that are not getattr names, and mock attribute access
(``model.set_x.assert_called_once_with(...)``, ``mock.call.set_x(...)``).  Calls inside
``pytest.raises`` / ``assertRaises`` are reported with action ``none`` (:mod:`codemods.scope`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.hooks import DEFAULT_HOOKS, Hook, HookSet
from codemods.pp_raise import raising_hooks
from codemods.records import Action, CallSite, Risk, Shape
from codemods.scope import skip_expected_errors

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


@dataclass(frozen=True)
class FoundCall:
    """One hook call in a parsed module, with the nodes a codemod needs to rewrite it."""

    call: cst.Call
    site: CallSite
    hooks: tuple[Hook, ...]
    #: The statement holding only this call, when the call is a statement of its own: a line,
    #: or the one-line body of a compound statement (``if ok: model.set_x(ids)``).
    statement: cst.SimpleStatementLine | cst.SimpleStatementSuite | None
    #: The argument carrying the ids, and the expression checked for ``None`` (``x`` in
    #: ``list(x)``).
    ids_arg: cst.Arg | None
    ids_core: cst.BaseExpression | None
    #: Column (0-based) where the statement starts, once on a line of its own.
    statement_column: int = 0
    #: Index in ``module.body`` of the top-level statement that contains the call.
    module_index: int = 0
    #: Names used in the function (or module) around the call: new names must avoid them.
    names_in_scope: frozenset[str] = frozenset()
    #: The call is a whole statement on a line shared with other statements
    #: (``a(); model.set_x(ids)``); ``codemods.split`` gives it a line of its own.
    shared_line: bool = False

    @property
    def rejects_none(self) -> bool:
        return any(not hook.accepts_none for hook in self.hooks)


@dataclass
class _Scope:
    """Names bound in one function (or module, or class) body."""

    node: cst.CSTNode
    parent: "_Scope | None" = None
    params: dict[str, cst.Param] = field(default_factory=dict)
    values: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    annotations: dict[str, cst.BaseExpression] = field(default_factory=dict)
    loops: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    #: For a class: ``self.<name> = value`` in its methods, with the method's scope.
    attributes: dict[str, list[tuple[cst.BaseExpression, "_Scope"]]] = field(default_factory=dict)
    attribute_annotations: dict[str, cst.BaseExpression] = field(default_factory=dict)
    #: Every name used anywhere inside this scope (nested scopes included).
    names: set[str] = field(default_factory=set)

    @property
    def self_name(self) -> str | None:
        """``self`` (or however the first parameter is called) for a method."""
        if isinstance(self.node, cst.FunctionDef) and self.parent is not None:
            if isinstance(self.parent.node, cst.ClassDef) and self.node.params.params:
                return self.node.params.params[0].name.value
        return None

    def knows(self, name: str) -> bool:
        return (
            name in self.params
            or name in self.values
            or name in self.annotations
            or name in self.loops
        )


class _ScopeCollector(cst.CSTVisitor):
    """Records, for every function/class/module body, the names it binds and to what."""

    def __init__(self, module: cst.Module) -> None:
        self.scopes: dict[cst.CSTNode, _Scope] = {module: _Scope(module)}
        self._stack: list[_Scope] = [self.scopes[module]]
        #: Every call in the module, in source order, and every node's parent (same pass).
        self.calls: list[cst.Call] = []
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._path: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._path:
            self.parents[node] = self._path[-1]
        self._path.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._path.pop()

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        for scope in self._stack:
            scope.names.add(node.value)

    def _push(self, node: cst.CSTNode) -> _Scope:
        scope = _Scope(node, parent=self._stack[-1])
        self.scopes[node] = scope
        self._stack.append(scope)
        return scope

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        scope = self._push(node)
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            scope.params[param.name.value] = param

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._stack.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._push(node)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._stack.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._push(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._stack.pop()

    def _bind(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self._stack[-1].values.setdefault(target.value, []).append(value)
        elif isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) == len(value.elements):
                for name, item in zip(target.elements, value.elements):
                    self._bind(name.value, item.value)
        elif self._self_attribute(target) is not None:
            scope = self._stack[-1]
            scope.parent.attributes.setdefault(self._self_attribute(target), []).append(
                (value, scope)
            )

    def _self_attribute(self, target: cst.BaseExpression) -> str | None:
        """``x`` for ``self.x`` assigned in a method, else None."""
        scope = self._stack[-1]
        if (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and scope.self_name is not None
            and target.value.value == scope.self_name
        ):
            return target.attr.value
        return None

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._stack[-1].annotations[node.target.value] = node.annotation.annotation
        attribute = self._self_attribute(node.target)
        if attribute is not None:
            parent = self._stack[-1].parent
            parent.attribute_annotations[attribute] = node.annotation.annotation
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        if isinstance(node.target, cst.Name):
            self._stack[-1].loops.setdefault(node.target.value, []).append(node.iter)


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
    search for the names a safe prefilter for discovery (see :mod:`codemods.prefilter`).
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


class _Analyzer:
    """Discovery for one module: resolution of hook names, ids, guards and handlers."""

    def __init__(self, wrapper: MetadataWrapper, path: str, hooks: HookSet) -> None:
        self.module = wrapper.module
        self.path = path
        self.hooks = hooks
        self.names = hooks.names
        self._wrapper = wrapper
        collector = _ScopeCollector(self.module)
        self.module.visit(collector)
        self.scopes = collector.scopes
        self.calls = collector.calls
        self.parents = collector.parents

    @functools.cached_property
    def positions(self):
        """Source positions, computed only once a hook call is actually found."""
        return self._wrapper.resolve(PositionProvider)

    # ---------------------------------------------------------------- scopes
    def _parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def _enclosing_scope_node(self, node: cst.CSTNode) -> cst.CSTNode:
        current = self._parent(node)
        while current is not None and not isinstance(current, _SCOPE_NODES):
            current = self._parent(current)
        return current if current is not None else self.module

    def _scope_chain(self, node: cst.CSTNode) -> list[_Scope]:
        """The scopes a name at ``node`` resolves in: its function, then the module."""
        inner = self.scopes.get(self._enclosing_scope_node(node))
        chain = [inner] if inner is not None else []
        if inner is None or inner.node is not self.module:
            chain.append(self.scopes[self.module])
        return chain

    def _lookup(self, name: str, scopes: Sequence[_Scope]) -> _Scope | None:
        for scope in scopes:
            if scope.knows(name):
                return scope
        return None

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

    # ---------------------------------------------------------------- guards
    def _asserts_present(self, test: cst.BaseExpression, key: str) -> bool:
        """True when ``test`` being true implies the ids (``key``) are set."""
        if _key(test) == key:
            return True
        if isinstance(test, cst.NamedExpr):
            return _key(test.target) == key or self._asserts_present(test.value, key)
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._asserts_present(test.left, key) or self._asserts_present(test.right, key)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._asserts_absent(test.expression, key)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            left, right = test.left, comparison.comparator
            if isinstance(comparison.operator, (cst.IsNot, cst.NotEqual)):
                return (_key(left) == key and _is_none(right)) or (
                    _key(right) == key and _is_none(left)
                )
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

    def _asserts_absent(self, test: cst.BaseExpression, key: str) -> bool:
        """True when ``test`` being false implies the ids (``key``) are set."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self._asserts_present(test.expression, key)
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
            return self._asserts_absent(test.left, key) or self._asserts_absent(test.right, key)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            comparison = test.comparisons[0]
            left, right = test.left, comparison.comparator
            if isinstance(comparison.operator, (cst.Is, cst.Equal)):
                if (_key(left) == key and _is_none(right)) or (
                    _key(right) == key and _is_none(left)
                ):
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
        self, statements: Sequence[cst.CSTNode], current: cst.CSTNode, key: str
    ) -> bool:
        for statement in statements:
            if statement is current:
                return False
            if isinstance(statement, cst.If) and statement.orelse is None:
                if self._exits(statement.body) and self._asserts_absent(statement.test, key):
                    return True
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assert) and self._asserts_present(small.test, key):
                        return True
        return False

    def _is_guarded(self, call: cst.Call, key: str) -> bool:
        child: cst.CSTNode = call
        node = self._parent(call)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, cst.If):
                if child is node.body and self._asserts_present(node.test, key):
                    return True
                if child is node.orelse and self._asserts_absent(node.test, key):
                    return True
            elif isinstance(node, cst.While):
                if child is node.body and self._asserts_present(node.test, key):
                    return True
            elif isinstance(node, cst.IfExp):
                if child is node.body and self._asserts_present(node.test, key):
                    return True
                if child is node.orelse and self._asserts_absent(node.test, key):
                    return True
            elif isinstance(node, cst.BooleanOperation):
                if child is node.right and isinstance(node.operator, cst.And):
                    if self._asserts_present(node.left, key):
                        return True
            elif isinstance(node, (cst.IndentedBlock, cst.Module)):
                if self._earlier_statements_guard(node.body, child, key):
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
            return any(_Analyzer._handler_catches(element.value) for element in kind.elements)
        chain = _dotted(kind)
        return chain is not None and chain[-1] in _HANDLES_NOT_IMPLEMENTED

    # ------------------------------------------------------------ statements
    _SHARED_LINE = "call shares its line with other statements"

    def _own_statement(
        self, call: cst.Call
    ) -> tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite | None, str]:
        """The statement that is only this call, or None and why not."""
        expr = self._parent(call)
        if not isinstance(expr, cst.Expr):
            return None, "call used inside an expression"
        line = self._parent(expr)
        if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            if len(line.body) == 1:
                return line, ""
        return None, self._SHARED_LINE

    def _module_index(self, node: cst.CSTNode) -> int:
        while self._parent(node) is not self.module:
            node = self._parent(node)
        return next(index for index, top in enumerate(self.module.body) if top is node)

    def _statement_column(self, statement: cst.CSTNode | None) -> int:
        if statement is None:
            return 0
        if isinstance(statement, cst.SimpleStatementSuite):
            owner = self._parent(statement)
            column = self.positions[owner].start.column if owner is not None else 0
            return column + len(self.module.default_indent)
        return self.positions[statement].start.column

    def _delegates(self, call: cst.Call) -> bool:
        """A call inside a hook's own definition: the hook forwards (``def set_x(...):
        self.inner.set_x(ids)``) and must keep raising, so it is not a caller to fix."""
        scope_node = self._enclosing_scope_node(call)
        return isinstance(scope_node, cst.FunctionDef) and scope_node.name.value in self.names

    # ----------------------------------------------------------------- sites
    def analyze(self, call: cst.Call) -> FoundCall | None:
        scopes = self._scope_chain(call)
        resolved = self._resolve_callee(call, scopes)
        if resolved is None:
            return None
        names, shape = resolved
        if self._delegates(call):
            return None
        hooks = tuple(hook for hook in self.hooks.hooks if hook.name in names)
        rejects_none = any(not hook.accepts_none for hook in hooks)
        # call-in (pp_raise): only hooks the release facts show raising NotImplementedError
        can_raise_pp = bool(raising_hooks(hooks))

        ids_arg = self._ids_arg(call, shape)
        ids_core = None if ids_arg is None or ids_arg.star else _unwrap_container(ids_arg.value)
        statement, not_own = self._own_statement(call)
        shared_line = statement is None and not_own == self._SHARED_LINE
        movable = statement is not None or shared_line
        guarded = ids_core is not None and self._is_guarded(call, _key(ids_core))
        handles = self._handles_not_implemented(call)

        risks: list[Risk] = []
        actions: list[Action] = []
        notes: list[str] = []
        review = False
        if rejects_none:
            if ids_arg is None:
                risks.append(Risk.LITERAL_NONE)
                notes.append("will raise: no layer ids passed and the hook requires them")
                review = True
            elif ids_core is not None and _is_none(ids_core):
                risks.append(Risk.LITERAL_NONE)
                notes.append(
                    "will raise ValueError: None passed to a hook that rejects it; "
                    "pass explicit layer ids"
                )
                review = True
            elif ids_core is not None and not guarded and self.maybe_none(ids_core, scopes):
                risks.append(Risk.MAYBE_NONE)
                if not movable:
                    notes.append(f"{not_own}; guard the ids by hand")
                    review = True
                elif not _is_repeatable(ids_core):
                    notes.append("ids come from an expression; bind them to a name first")
                    review = True
                else:
                    actions.append(Action.GUARD)
                    lenient = [hook.name for hook in hooks if hook.accepts_none]
                    if lenient:
                        notes.append(
                            f"the guard also skips {', '.join(lenient)} (it accepts None) "
                            "when ids are unset"
                        )
        if can_raise_pp and not handles:
            risks.append(Risk.PP_UNSUPPORTED)
            if not review:
                if not movable:
                    notes.append(f"{not_own}; handle NotImplementedError by hand")
                    review = True
                else:
                    actions.append(Action.FALLBACK)
        if review:
            actions = [Action.REVIEW]

        position = self.positions[call].start
        site = CallSite(
            path=self.path,
            line=position.line,
            column=position.column + 1,
            hook="|".join(sorted(names)),
            shape=shape,
            ids_source=None if ids_arg is None else _code(ids_arg.value),
            risks=tuple(risks) or (Risk.SAFE,),
            guarded=guarded,
            handles_not_implemented=handles,
            actions=tuple(actions) or (Action.NONE,),
            note="; ".join(notes),
        )
        return FoundCall(
            call=call,
            site=site,
            hooks=hooks,
            statement=statement,
            ids_arg=ids_arg,
            ids_core=ids_core,
            statement_column=self._statement_column(statement),
            module_index=self._module_index(call),
            names_in_scope=frozenset(scopes[0].names) if scopes else frozenset(),
            shared_line=shared_line,
        )


def find_calls(
    wrapper: MetadataWrapper, path: str = "<string>", hooks: HookSet = DEFAULT_HOOKS
) -> list[FoundCall]:
    """Every hook call in ``wrapper.module``, in source order."""
    analyzer = _Analyzer(wrapper, path, hooks)
    found = (analyzer.analyze(call) for call in analyzer.calls)
    found = sorted(
        (item for item in found if item is not None),
        key=lambda item: (item.site.line, item.site.column),
    )
    # call-in (scope): calls inside pytest.raises / assertRaises are reported, never rewritten
    return skip_expected_errors(found, wrapper.module)


def find_call_sites(
    module: cst.Module, path: str = "<string>", hooks: HookSet = DEFAULT_HOOKS
) -> list[CallSite]:
    """Call-site records for a parsed module (a convenience over :func:`find_calls`)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # read-only use
    return [item.site for item in find_calls(wrapper, path, hooks)]


def mentions_hooks(text: str | bytes, hooks: HookSet = DEFAULT_HOOKS) -> bool:
    """Cheap text test: could this source contain a hook call at all?"""
    if isinstance(text, bytes):
        return any(name.encode() in text for name in hooks.names)
    return any(name in text for name in hooks.names)


def by_call(found: Iterable[FoundCall]) -> dict[cst.Call, FoundCall]:
    return {item.call: item for item in found}
