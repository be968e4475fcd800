"""Evidence across the module: does the code need the capture, or does it run without it?

Read from the function around a call and from what discovery's one walk collected over the
module (:class:`~codemods.callers.analyse.scopes._ScopeCollector`: every read of a capture,
``.hidden_states``, ``.layers_to_capture``, ``*aux_hidden_states``), never by another walk
of the module.

Capture **required** (:meth:`EvidenceMixin._required_evidence`)::

    for name in HOOKS:                       # a loop that stops at the first hook it calls,
        setter = getattr(model, name, None)  # and raises when none resolved
        if callable(setter):
            setter(ids)
            return
    raise RuntimeError("no capture hook")

    assert layer_ids is not None, "layer ids not resolved"   # asserts on the ids
    model.set_dspark_layers_to_capture(layer_ids)

    class Target:                            # the captures are read back elsewhere in the
        def __init__(self, model, ids):      # class (or at module level)
            model.set_dspark_layers_to_capture(ids)
        def forward(self, batch):
            return self.model(batch).hidden_states

and extraction code (a module or class named ``*extract*``).

Capture **optional** (:meth:`EvidenceMixin._optional_evidence`): a ``hasattr``/``callable``
check whose other branch goes on (no raise follows), a handler around the call that goes on,
or a flag / return value that reports capture off (``return False``, ``capture_x = False``).

Where both show, the signs conflict: the call is left as it is and reported for review.
"""

from __future__ import annotations

import libcst as cst

from codemods.callers.analyse.scopes import AnalyzerBase
from codemods.callers.analyse.syntax import _SCOPE_NODES, _call_name, _dotted, _key
from codemods.callers.fieldwalk import _LAYOUT_NODES, _dispatch


def _walk(node: cst.CSTNode, skip_scopes: bool = True):
    """Pre-order over ``node`` and its subtree by reading node fields (as
    :mod:`codemods.callers.fieldwalk` does: nothing is rebuilt, layout is skipped), not into
    nested functions, classes or lambdas."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        children = []
        for name in _fields(type(current)):
            value = getattr(current, name)
            if isinstance(value, cst.CSTNode):
                children.append(value)
            elif isinstance(value, (list, tuple)):
                children.extend(item for item in value if isinstance(item, cst.CSTNode))
        for child in reversed(children):
            if type(child) in _LAYOUT_NODES or (skip_scopes and isinstance(child, _SCOPE_NODES)):
                continue
            stack.append(child)


def _fields(kind: type) -> tuple[str, ...]:
    return _dispatch(_NoVisits, kind)[2]


class _NoVisits:
    """A walker type without visit methods: :func:`_dispatch` then gives only the fields."""


def _last_small(body: cst.BaseSuite) -> cst.BaseSmallStatement | None:
    if not body.body:
        return None
    if isinstance(body, cst.SimpleStatementSuite):
        return body.body[-1]
    last = body.body[-1]
    return last.body[-1] if isinstance(last, cst.SimpleStatementLine) else None


def _ends_with(body: cst.BaseSuite, kinds) -> bool:
    return isinstance(_last_small(body), kinds)


def _is_check(test: cst.BaseExpression) -> bool:
    """``hasattr(...)`` / ``callable(...)`` in ``test`` (``not`` and ``and`` looked through)."""
    for node in _walk(test):
        if isinstance(node, cst.Call) and _call_name(node) in {"hasattr", "callable"}:
            return True
    return False


def _assigned_names(node: cst.CSTNode) -> set[str]:
    names = set()
    for inner in _walk(node):
        if isinstance(inner, cst.AssignTarget) and isinstance(inner.target, cst.Name):
            names.add(inner.target.value)
    return names


#: Exceptions a capture hook (or looking it up) raises, and the classes above them.
_HOOK_ERRORS = frozenset(
    {
        "NotImplementedError",
        "RuntimeError",
        "ValueError",
        "AttributeError",
        "TypeError",
        "Exception",
        "BaseException",
    }
)


def _catches_hook_errors(kind: cst.BaseExpression | None) -> bool:
    if kind is None:
        return True
    if isinstance(kind, cst.Tuple):
        return any(_catches_hook_errors(element.value) for element in kind.elements)
    chain = _dotted(kind)
    return chain is not None and chain[-1] in _HOOK_ERRORS


def _false_value(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def _target_text(target: cst.BaseExpression) -> str:
    return _key(target)


class EvidenceMixin(AnalyzerBase):
    """Required and optional evidence for one call (``self._parent``, ``self.capture_reads``,
    ``self.path`` of the analyzer)."""

    # ------------------------------------------------------------------ helpers
    def _function_body(self, call: cst.Call) -> cst.CSTNode:
        scope = self._enclosing_scope_node(call)
        return scope.body if isinstance(scope, cst.FunctionDef) else scope

    def _ancestors(self, node: cst.CSTNode):
        """``(child, parent)`` pairs from ``node`` up to its function (or module)."""
        child, parent = node, self._parent(node)
        while parent is not None and not isinstance(parent, _SCOPE_NODES):
            yield child, parent
            child, parent = parent, self._parent(parent)

    def _enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        current = self._parent(node)
        while current is not None:
            if isinstance(current, cst.ClassDef):
                return current
            current = self._parent(current)
        return None

    def _in_hook_definition(self, node: cst.CSTNode) -> bool:
        current = self._parent(node)
        while current is not None:
            if isinstance(current, cst.FunctionDef) and current.name.value in self.names:
                return True
            current = self._parent(current)
        return False

    # ------------------------------------------------------------------ required
    def _required_evidence(self, call: cst.Call, ids_core: cst.BaseExpression | None) -> list[str]:
        reasons = []
        if self._raises_after_loop(call):
            reasons.append("the code raises when no hook was called")
        if ids_core is not None and self._asserts_ids(call, _key(ids_core)):
            reasons.append("the code asserts on the layer ids")
        if self._read_in_class_or_module(call):
            reasons.append("the captures are read back (hidden_states / layers_to_capture)")
        extraction = self._extraction(call)
        if extraction:
            reasons.append(extraction)
        return reasons

    def _raises_after_loop(self, call: cst.Call) -> bool:
        """The call is in a loop that stops once it called a hook (``return``/``break``),
        and the loop's ``else:`` or the statements after the loop raise (outright, or under a test of a name the
        loop sets: ``if capture_hook is None: raise``)."""
        for child, node in self._ancestors(call):
            if not isinstance(node, (cst.For, cst.While)) or child is not node.body:
                continue
            if not any(isinstance(n, (cst.Return, cst.Break)) for n in _walk(node.body)):
                continue
            if isinstance(node.orelse, cst.Else) and _ends_with(node.orelse.body, cst.Raise):
                return True  # for ...: ... break / else: raise
            block = self._parent(node)
            if not isinstance(block, (cst.IndentedBlock, cst.Module)):
                continue
            statements = list(block.body)
            set_in_loop = _assigned_names(node.body)
            for statement in statements[statements.index(node) + 1 :]:
                if isinstance(statement, cst.SimpleStatementLine) and any(
                    isinstance(small, cst.Raise) for small in statement.body
                ):
                    return True
                if isinstance(statement, cst.If) and _ends_with(statement.body, cst.Raise):
                    tested = {n.value for n in _walk(statement.test) if isinstance(n, cst.Name)}
                    if tested & set_in_loop:
                        return True
        return False

    def _asserts_ids(self, call: cst.Call, key: str) -> bool:
        for node in _walk(self._function_body(call)):
            if isinstance(node, cst.Assert):
                if any(_key(inner) == key for inner in _walk(node.test)):
                    return True
        return False

    def _read_in_class_or_module(self, call: cst.Call) -> bool:
        """A capture read in the call's class, or outside every class (not in a hook's own
        definition, not an assignment target)."""
        owner = self._enclosing_class(call)
        for read in self.capture_reads:
            if isinstance(self._parent(read), cst.AssignTarget):
                continue
            where = self._enclosing_class(read)
            if where is not None and where is not owner:
                continue
            if self._in_hook_definition(read):
                continue
            return True
        return False

    def _extraction(self, call: cst.Call) -> str | None:
        stem = str(self.path).replace("\\", "/").rsplit("/", 1)[-1]
        if "extract" in stem.lower():
            return "extraction code (the module)"
        current = self._parent(call)
        while current is not None:
            if isinstance(current, cst.ClassDef) and "extract" in current.name.value.lower():
                return f"extraction code (class {current.name.value})"
            current = self._parent(current)
        return None

    # ------------------------------------------------------------------ optional
    def _optional_evidence(self, call: cst.Call) -> list[str]:
        signs = []
        # a check inside a loop that raises once no hook was called does not go on
        if not self._raises_after_loop(call) and self._check_goes_on(call):
            signs.append("a hasattr/callable check goes on without the hook")
        if self._handler_goes_on(call):
            signs.append("a handler around the call goes on")
        if self._reports_off(call):
            signs.append("the code reports capture off (return False / a flag set False)")
        return signs

    def _check_goes_on(self, call: cst.Call) -> bool:
        for child, node in self._ancestors(call):
            if isinstance(node, cst.If) and child is node.body and _is_check(node.test):
                other = node.orelse
                while isinstance(other, cst.If):  # elif ...: the chain's last branch
                    other = other.orelse
                if other is None or not (
                    isinstance(other, cst.Else) and _ends_with(other.body, cst.Raise)
                ):
                    return True
            if isinstance(node, (cst.IndentedBlock, cst.Module)):
                for statement in node.body:
                    if statement is child:
                        break
                    if (
                        isinstance(statement, cst.If)
                        and statement.orelse is None
                        and _is_check(statement.test)
                        and _ends_with(statement.body, (cst.Return, cst.Continue, cst.Break))
                    ):
                        return True
        return False

    def _handler_goes_on(self, call: cst.Call) -> bool:
        """A handler around the call that catches what a hook raises (no hook, unset ids,
        PP) and does not raise again."""
        for child, node in self._ancestors(call):
            if isinstance(node, cst.Try) and child is node.body:
                for handler in node.handlers:
                    if _catches_hook_errors(handler.type) and not _ends_with(
                        handler.body, cst.Raise
                    ):
                        return True
        return False

    def _reports_off(self, call: cst.Call) -> bool:
        for node in _walk(self._function_body(call)):
            if isinstance(node, cst.Return) and node.value is not None:
                if _false_value(node.value):
                    return True
            if isinstance(node, cst.Assign) and _false_value(node.value):
                if any("capture" in _target_text(t.target).lower() for t in node.targets):
                    return True
        return False
