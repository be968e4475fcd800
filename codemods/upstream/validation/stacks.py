"""The decoder stack a model class's capture hook sets up, resolved from the patched source.

What relays captures across pipeline stages is the decoder stack's ``forward``: the patch
declares ``pp_aux_relay_methods`` on each stack class whose forward it rewrites, and the
runtime guard (``check_pp_aux_capture``) asks, right after a hook ran, the stack the hook
gave a relay to (``set_pp_aux_capture(self.<attr>, ...)``).  The validation answers the same
question without building the model: :func:`hook_stacks` reads, in the files as the patch
leaves them, the hook a class resolves along its method resolution order, the stacks it
passes to ``set_pp_aux_capture`` and the hooks it delegates to
(``self.language_model.set_eagle3_layers_to_capture(...)``), and the class each
``self.<attr>`` holds, from the constructor the class runs:

* ``self.model = X(...)`` in ``__init__``, directly, through a factory method
  (``self._init_model(...)`` returning ``X(...)``) or a class attribute
  (``self.body_cls(...)``), each looked up along the class's own resolution order;
* a constructor parameter (``language_model_cls``) bound by a ``super().__init__(...)``
  call or by its default;
* a constructor that sets none, through ``super().__init__``.

Anything else (two different classes, an attribute set outside the constructors, a base
outside the model files) resolves to nothing, and the validation refuses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from codemods.catalog.derive.index import ClassKey
from codemods.catalog.methods import RELAYED
from codemods.upstream.validation import refusals
from codemods.upstream.validation.model_classes import ModelClasses

#: The class attribute the patch declares the relayed methods with.
RELAY_METHODS_ATTR = "pp_aux_relay_methods"
#: The shipped helper a patched hook gives its decoder stack a relay with.
SET_RELAY = "set_pp_aux_capture"
_DEPTH = 8


def declared(classes: ModelClasses, key: ClassKey) -> tuple[str, ...] | None:
    """The methods the class ``key`` declares in its own body (None: no declaration)."""
    node = classes.classdef(key)
    for statement in node.body if node is not None else []:
        if (
            isinstance(statement, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id == RELAY_METHODS_ATTR for t in statement.targets
            )
            and isinstance(statement.value, ast.Tuple | ast.List)
        ):
            return tuple(
                str(e.value)
                for e in statement.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return None


def stack_relays(classes: ModelClasses, stack: ClassKey, method: str) -> bool:
    """Whether the class defining the ``forward`` of ``stack`` declares ``method``."""
    for cls in classes.mro(stack) or []:
        node = classes.classdef(cls)
        if node is None:
            return False
        if any(getattr(s, "name", None) == "forward" for s in node.body):
            return method in (declared(classes, cls) or ())
    return False


def _method(
    classes: ModelClasses, key: ClassKey, name: str
) -> tuple[ClassKey, ast.FunctionDef] | None:
    """The class along ``key``'s resolution order that defines the method ``name``, and it."""
    for cls in classes.mro(key) or []:
        node = classes.classdef(cls)
        for statement in node.body if node is not None else []:
            if isinstance(statement, ast.FunctionDef) and statement.name == name:
                return cls, statement
    return None


def _class_attribute(
    classes: ModelClasses, key: ClassKey, name: str
) -> tuple[ClassKey, ast.expr] | None:
    for cls in classes.mro(key) or []:
        node = classes.classdef(cls)
        for statement in node.body if node is not None else []:
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in statement.targets
            ):
                return cls, statement.value
    return None


@dataclass
class _Scope:
    """Where an expression is read: the class whose source holds it, the instance's class
    and the constructor parameters bound so far (name -> expression, its scope)."""

    owner: ClassKey
    instance: ClassKey
    bound: dict[str, tuple[ast.expr, _Scope]] = field(default_factory=dict)
    #: Names the function imports in its own body: name -> (module, name there).
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)


class _Unresolved(Exception):
    """The class an expression builds cannot be told from the source."""


def _walk(function: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of ``function``'s body, not those of functions nested in it."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop(0)
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))
    return found


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _classes_of(classes: ModelClasses, expr: ast.expr, scope: _Scope, depth: int) -> set[ClassKey]:
    """The model classes whose instance ``expr`` builds (``X(...)``) or names (``X``)."""
    if depth > _DEPTH:
        raise _Unresolved
    if isinstance(expr, ast.Call):
        func = expr.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
        ):
            factory = _method(classes, scope.instance, func.attr)
            if factory is not None:
                owner, node = factory
                returns = [
                    n.value
                    for n in _walk(node)
                    if isinstance(n, ast.Return) and n.value is not None
                ]
                inner = _Scope(owner, scope.instance)
                found: set[ClassKey] = set()
                for value in returns:
                    found |= _classes_of(classes, value, inner, depth + 1)
                return found
        return _classes_of(classes, func, scope, depth + 1)
    if isinstance(expr, ast.Name):
        if expr.id in scope.bound:
            value, where = scope.bound[expr.id]
            return _classes_of(classes, value, where, depth + 1)
        if expr.id in scope.imports:
            dotted, name = scope.imports[expr.id]
            target = classes._file_of(dotted)
            key = classes.resolve(target, name) if target is not None else None
        else:
            key = classes.resolve(scope.owner[0], expr.id)
        if key is None:
            raise _Unresolved
        return {key}
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.value.id in ("self", "cls"):
            found_attr = _class_attribute(classes, scope.instance, expr.attr)
            if found_attr is None:
                raise _Unresolved
            owner, value = found_attr
            return _classes_of(classes, value, _Scope(owner, scope.instance), depth + 1)
        module = classes.module(scope.owner[0])
        imported = module.imports.get(expr.value.id) if module is not None else None
        target = classes._file_of(".".join(imported)) if imported is not None else None
        key = classes.resolve(target, expr.attr) if target is not None else None
        if key is None:
            raise _Unresolved
        return {key}
    raise _Unresolved


def _bind(
    function: ast.FunctionDef,
    call: ast.Call | None,
    scope: _Scope | None,
    owner: ClassKey,
    instance: ClassKey,
) -> _Scope:
    """The scope of ``function`` (defined in ``owner``) called by ``call`` from ``scope``
    (None: by the loader, which passes no optional argument)."""
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)][1:]
    defaults = function.args.defaults
    bound: dict[str, tuple[ast.expr, _Scope]] = {}
    inner = _Scope(owner, instance, bound)
    for name, default in zip(params[len(params) - len(defaults) :], defaults, strict=True):
        bound[name] = (default, _Scope(owner, instance))
    for arg, kw_default in zip(function.args.kwonlyargs, function.args.kw_defaults, strict=True):
        if kw_default is not None:
            bound[arg.arg] = (kw_default, _Scope(owner, instance))
    if call is not None and scope is not None:
        for name, value in zip(params, call.args, strict=False):
            if isinstance(value, ast.Starred):
                raise _Unresolved
            bound[name] = (value, scope)
        for keyword in call.keywords:
            if keyword.arg is None:
                raise _Unresolved
            bound[keyword.arg] = (keyword.value, scope)
    return inner


def _super_init(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


def attribute_class(classes: ModelClasses, instance: ClassKey, attr: str) -> ClassKey | None:
    """The model class ``self.<attr>`` holds once ``instance``'s constructors ran (None:
    cannot be told)."""
    order = classes.mro(instance) or []
    call: ast.Call | None = None
    scope: _Scope | None = None
    index = 0
    try:
        while index < len(order):
            cls = order[index]
            node = classes.classdef(cls)
            if node is None:
                return None
            init = next(
                (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"),
                None,
            )
            index += 1
            if init is None:
                continue
            inner = _bind(init, call, scope, cls, instance)
            nodes = _walk(init)
            inner.imports.update(
                (alias.asname or alias.name, (n.module, alias.name))
                for n in nodes
                if isinstance(n, ast.ImportFrom) and n.module and not n.level
                for alias in n.names
            )
            values = [
                n.value
                for n in nodes
                if isinstance(n, ast.Assign)
                and any(
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and t.attr == attr
                    for t in n.targets
                )
                and not _is_none(n.value)
            ]
            if values:
                found: set[ClassKey] = set()
                for value in values:
                    found |= _classes_of(classes, value, inner, 0)
                return found.pop() if len(found) == 1 else None
            supers = [n for n in nodes if _super_init(n)]
            if len(supers) != 1:
                return None
            call, scope = supers[0], inner  # type: ignore[assignment]
    except _Unresolved:
        return None
    return None


def _hook_of(classes: ModelClasses, key: ClassKey, hook: str) -> ast.FunctionDef | None:
    found = _method(classes, key, hook)
    return None if found is None else found[1]


@dataclass(frozen=True)
class HookParts:
    """What a hook reaches: the class of each attribute path it goes through (``"model"``,
    ``"language_model.model"``; ``""``: the instance itself) and the paths of the decoder
    stacks it gives a relay to."""

    parts: dict[str, ClassKey]
    stacks: tuple[str, ...]


def hook_parts(
    classes: ModelClasses, key: ClassKey, hook: str, prefix: str = "", depth: int = 0
) -> HookParts | None:
    """What the hook ``hook`` of an instance of ``key`` (at the attribute path ``prefix``)
    reaches, through the hooks it delegates to; None where a class it reaches cannot be
    told (or ``key`` has no such hook)."""
    function = _hook_of(classes, key, hook)
    if function is None or depth > _DEPTH:
        return None
    parts: dict[str, ClassKey] = {prefix: key}
    stacks: list[str] = []

    def path(attr: str) -> str:
        return f"{prefix}.{attr}" if prefix else attr

    for node in _walk(function):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == SET_RELAY:
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id == "self":
                stacks.append(prefix)
                continue
            if not (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                return None
            stack = attribute_class(classes, key, target.attr)
            if stack is None:
                return None
            parts[path(target.attr)] = stack
            stacks.append(path(target.attr))
        elif (
            isinstance(func, ast.Attribute)
            and func.attr.startswith("set_")
            and func.attr.endswith("_layers_to_capture")
            and isinstance(func.value, ast.Attribute)
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "self"
        ):
            inner = attribute_class(classes, key, func.value.attr)
            if inner is None:
                return None
            found = hook_parts(classes, inner, func.attr, path(func.value.attr), depth + 1)
            if found is None:
                if _hook_of(classes, inner, func.attr) is None:
                    continue  # guarded by hasattr: the call never runs
                return None
            parts.update(found.parts)
            stacks += found.stacks
    return HookParts(parts, tuple(dict.fromkeys(stacks)))


def hook_stacks(classes: ModelClasses, key: ClassKey, hook: str) -> list[ClassKey] | None:
    """The decoder stacks the hook ``hook`` of an instance of ``key`` gives a relay to,
    through the hooks it delegates to; None where one of them cannot be told (or ``key``
    has no such hook)."""
    found = hook_parts(classes, key, hook)
    return None if found is None else [found.parts[p] for p in found.stacks]


def unresolved(classes: ModelClasses) -> dict[str, str]:
    """architecture -> :data:`.refusals.UNRESOLVED`, over the ``EntryClass`` members of the
    model files whose capture hook reaches a class that cannot be resolved from the source
    (:func:`hook_parts`): the validation refuses them rather than guess."""
    found: dict[str, str] = {}
    hooks = [f"set_{method.lower()}_layers_to_capture" for method in RELAYED]
    for file in classes.entry_files():
        module = classes.module(file)
        for entry in module.entry if module is not None else []:
            key = classes.resolve(file, entry)
            if key is not None and any(
                _hook_of(classes, key, hook) is not None and hook_parts(classes, key, hook) is None
                for hook in hooks
            ):
                found[key[1]] = refusals.UNRESOLVED
    return found
