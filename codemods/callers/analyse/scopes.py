"""Scopes and names: what each function, class or module body binds, to what, and
every node's parent; collected in one visit of the module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from codemods.callers.analyse.syntax import (
    _SCOPE_NODES,
    READ_ATTRIBUTES,
    READ_SUFFIX,
    is_capture_read,
)
from codemods.callers.fieldwalk import _LAYOUT_NODES, FieldWalker
from codemods.catalog.hooks import HookSet


@dataclass
class _Scope:
    """Names bound in one function (or module, or class) body."""

    node: cst.CSTNode
    parent: _Scope | None = None
    params: dict[str, cst.Param] = field(default_factory=dict)
    values: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    annotations: dict[str, cst.BaseExpression] = field(default_factory=dict)
    loops: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    #: For a class: ``self.<name> = value`` in its methods, with the method's scope.
    attributes: dict[str, list[tuple[cst.BaseExpression, _Scope]]] = field(default_factory=dict)
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


class _ScopeCollector(FieldWalker, cst.CSTVisitor):
    """Records, for every function/class/module body, the names it binds and to what."""

    def __init__(self, module: cst.Module) -> None:
        self.scopes: dict[cst.CSTNode, _Scope] = {module: _Scope(module)}
        self._stack: list[_Scope] = [self.scopes[module]]
        #: Every call in the module, in source order, and every node's parent (same pass:
        #: :meth:`walk`, or LibCST's ``module.visit``).
        self.calls: list[cst.Call] = []
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        #: Every import statement, at any depth, in source order.
        self.imports: list[cst.Import | cst.ImportFrom] = []
        #: Every read of a capture (``x.hidden_states``, ``x.layers_to_capture``,
        #: ``*aux_hidden_states``; assignment targets included): the module-wide evidence of
        #: :mod:`codemods.callers.analyse.evidence`.
        self.capture_reads: list[cst.CSTNode] = []
        self._path: list[cst.CSTNode] = []  # (the LibCST visit's route)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if type(node) in _LAYOUT_NODES:
            return False  # whitespace and punctuation: nothing to bind, nobody's parent
        if self._path:
            self.parents[node] = self._path[-1]
        self._path.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if type(original_node) in _LAYOUT_NODES:
            return
        super().on_leave(original_node)
        self._path.pop()

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        for scope in self._stack:
            scope.names.add(node.value)
        if node.value.endswith(READ_SUFFIX) and is_capture_read(node):
            parent = self.parents.get(node)
            if not (isinstance(parent, cst.Attribute) and parent.attr is node):
                self.capture_reads.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        name = node.attr.value  # (is_capture_read, inlined: every attribute passes here)
        if name in READ_ATTRIBUTES or (name.endswith(READ_SUFFIX) and is_capture_read(node)):
            self.capture_reads.append(node)

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
                for name, item in zip(target.elements, value.elements, strict=True):
                    self._bind(name.value, item.value)
        else:
            # (a method's ``self.x``: its scope has a parent, the class)
            attribute = self._self_attribute(target)
            scope = self._stack[-1]
            if attribute is not None and scope.parent is not None:
                scope.parent.attributes.setdefault(attribute, []).append((value, scope))

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
        parent = self._stack[-1].parent
        if attribute is not None and parent is not None:
            parent.attribute_annotations[attribute] = node.annotation.annotation
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind(node.target, node.value)

    def visit_For(self, node: cst.For) -> None:
        if isinstance(node.target, cst.Name):
            self._stack[-1].loops.setdefault(node.target.value, []).append(node.iter)
        elif isinstance(node.target, (cst.Tuple, cst.List)):
            # ``for setter_name, label in TABLE`` (also nested, starred, over ``enumerate(TABLE)``
            # or ``TABLE.items()``): each name may hold any item of any row (what value
            # resolution reads from :func:`_rows`).
            rows = _rows(node.iter)
            loops = self._stack[-1].loops
            for name in _target_names(node.target):
                loops.setdefault(name, []).append(rows)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _target_names(element.value)]
    return []


#: The rows built for each unpacking loop's iterable (``id`` -> the iterable and its rows):
#: one object per loop, whichever walk asks; cleared when large.
_ROWS: dict[int, tuple[cst.BaseExpression, cst.ListComp]] = {}


def _rows(iterable: cst.BaseExpression) -> cst.ListComp:
    """``[item for row in iterable for item in row]`` (built once per loop, not in the
    module); over ``enumerate(x)``, the rows of ``x``; over ``x.items()``, each key, its
    value and the value's items."""
    known = _ROWS.get(id(iterable))
    if known is not None and known[0] is iterable:
        return known[1]
    if len(_ROWS) > 4096:
        _ROWS.clear()
    source = iterable
    if isinstance(source, cst.Call) and source.args and _func_name(source) == "enumerate":
        source = source.args[0].value
    if (
        isinstance(source, cst.Call)
        and not source.args
        and isinstance(source.func, cst.Attribute)
        and source.func.attr.value == "items"
    ):
        table = source.func.value
        row = cst.Tuple(
            elements=[
                cst.Element(cst.Name("key")),
                cst.Element(_subscript(table)),
                cst.StarredElement(_subscript(table)),
            ]
        )
        inner = cst.CompFor(target=cst.Name("item"), iter=row)
        outer = cst.CompFor(target=cst.Name("key"), iter=table, inner_for_in=inner)
    else:
        inner = cst.CompFor(target=cst.Name("item"), iter=cst.Name("row"))
        outer = cst.CompFor(target=cst.Name("row"), iter=source, inner_for_in=inner)
    rows = cst.ListComp(elt=cst.Name("item"), for_in=outer)
    _ROWS[id(iterable)] = (iterable, rows)
    return rows


def _func_name(call: cst.Call) -> str | None:
    if isinstance(call.func, cst.Name):
        return call.func.value
    if isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    return None


def _subscript(table: cst.BaseExpression) -> cst.Subscript:
    return cst.Subscript(
        value=table, slice=[cst.SubscriptElement(slice=cst.Index(value=cst.Name("key")))]
    )


class AnalyzerBase:
    """What every part of the analyzer reads (the module, its path and hooks, and what the
    one walk collected: :class:`_ScopeCollector`), with the name lookups over it.  The parts
    (``ValuesMixin``, ``NullnessMixin``, ...) derive from it; ``sites._Analyzer`` sets it."""

    module: cst.Module
    path: str
    hooks: HookSet
    names: frozenset[str]
    scopes: dict[cst.CSTNode, _Scope]
    calls: list[cst.Call]
    parents: dict[cst.CSTNode, cst.CSTNode]
    imports: list[cst.Import | cst.ImportFrom]
    capture_reads: list[cst.CSTNode]

    if TYPE_CHECKING:

        @property
        def hook_calls(self) -> list[cst.Call]:
            """The calls that reach a hook, outside the hooks' own definitions."""
            ...

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
