"""Capture required: calls whose code needs the capture, so that neither the guard's skip nor
the fallback's warning may turn a loud failure into a run that goes on without it.

A call is *capture required* when one of these holds (each found from the code around it):

- **read after the call**: later in the same function (or module), the code asserts or reads
  ``capture_aux_hidden_states`` or an aux output (a name or attribute ending in
  ``aux_hidden_states``), e.g. ``assert model.capture_aux_hidden_states``;
- **speculative feature flag**: the call runs under an ``if`` (or after an early ``if not
  ...: return``) testing a ``*_use_aux_hidden_state`` flag or a speculative-algorithm check
  such as ``spec_algorithm.is_eagle3()`` / ``is_dflash()`` / ``is_dspark()``;
- **hook lookup that raises**: the function raises when the model has no hook (``if not
  hasattr(model, "set_..."): raise``, an ``if hasattr(...): ... else: raise`` chain holding
  the call, or ``setter = getattr(model, name, None)`` then ``if setter is None: raise``);
- **serving code**: the module is an SGLang model runner or serving module, decided by its
  path and class: a path under ``srt/model_executor/``, a file named ``model_runner*.py``, or
  a call inside a class whose name ends with ``ModelRunner``.

Such calls get no skip and no swallowed error.  Where the ids may be unset, the guard checks
them early and raises a ``ValueError`` naming the unset value (whatever ``--guard-policy``
says), which tells more than the hook's own error; otherwise the call is left alone.  Either
way the site's note starts with :data:`REQUIRED_PREFIX` and gives the reasons.
"""

from __future__ import annotations

import builtins
import keyword
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

import libcst as cst

from codemods.callers.analyse.evidence import EvidenceMixin
from codemods.callers.analyse.syntax import _SCOPE_NODES, _call_name, last_name
from codemods.callers.records import REQUIRED_PREFIX
from codemods.catalog import methods

__all__ = ["REQUIRED_PREFIX", "RequiredMixin", "binding_name", "is_serving_path"]


#: Speculative-algorithm checks whose truth means the drafter needs the capture.
SPEC_CHECKS = methods.SPEC_CHECKS

_FLAG_SUFFIX = "use_aux_hidden_state"
_READ_NAMES = ("capture_aux_hidden_states",)
_READ_SUFFIX = "aux_hidden_states"


def is_serving_path(path: str) -> bool:
    """A module path under ``srt/model_executor/``, or a file named ``model_runner*.py``."""
    posix = PurePosixPath(str(path).replace("\\", "/"))
    parts = posix.parts
    if posix.name.startswith("model_runner") and posix.name.endswith((".py", ".pyi")):
        return True
    return any(parts[i : i + 2] == ("srt", "model_executor") for i in range(len(parts) - 1))


class _Finder(cst.CSTVisitor):
    """Pre-order walk that notes whether ``predicate`` holds for a node."""

    def __init__(self, predicate) -> None:
        self.predicate = predicate
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if self.predicate(node):
            self.found = True
            return False
        return True


def _contains(node: cst.CSTNode, predicate) -> bool:
    finder = _Finder(predicate)
    node.visit(finder)
    return finder.found


def _is_flag(node: cst.CSTNode) -> bool:
    name = last_name(node)
    if name is not None and name.endswith(_FLAG_SUFFIX):
        return True
    return isinstance(node, cst.Call) and last_name(node.func) in SPEC_CHECKS


def _is_aux_read(node: cst.CSTNode) -> bool:
    name = last_name(node)
    return name is not None and (name in _READ_NAMES or name.endswith(_READ_SUFFIX))


def _negated(test: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return test.expression
    return None


def _ends_with_raise(body: cst.BaseSuite) -> bool:
    if not body.body:
        return False
    last = body.body[-1]
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], cst.Raise)
    return isinstance(body, cst.SimpleStatementSuite) and isinstance(last, cst.Raise)


def _ends_with_exit(body: cst.BaseSuite) -> bool:
    if not body.body:
        return False
    last = body.body[-1]
    small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) else last
    return isinstance(small, (cst.Raise, cst.Return))


def _lookup_of(hook_names: frozenset[str]) -> Callable[[cst.CSTNode], bool]:
    """A predicate: ``hasattr(x, name)`` / ``getattr(x, name, ...)`` where ``name`` is a hook
    name or an expression (a literal naming another attribute is not a hook lookup)."""

    def is_lookup(node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Call) or _call_name(node) not in {"hasattr", "getattr"}:
            return False
        if len(node.args) < 2:
            return False
        name = node.args[1].value
        if isinstance(name, cst.SimpleString):
            return name.evaluated_value in hook_names
        return True

    return is_lookup


class _AfterCall(cst.CSTVisitor):
    """Whether an aux read follows ``call`` in source order (assignment targets excluded)."""

    def __init__(self, call: cst.Call) -> None:
        self.call = call
        self.passed = False
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.found:
            return False
        if node is self.call:
            self.passed = True
            return False
        if isinstance(node, cst.AssignTarget):
            return False
        if self.passed and _is_aux_read(node):
            self.found = True
            return False
        return True


class RequiredMixin(EvidenceMixin):
    """Why a call's capture is required (``self._parent``, ``self.path`` of the analyzer)."""

    def _capture_required(
        self, call: cst.Call, ids_core: cst.BaseExpression | None = None
    ) -> str | None:
        reasons = []
        scope = self._enclosing_scope_node(call)
        if self._read_after(call, scope):
            reasons.append("capture_aux_hidden_states or aux outputs are read after the call")
        if self._under_flag(call):
            reasons.append("the call runs under a speculative-decoding feature flag")
        if self._lookup_raises(call, scope):
            reasons.append("the code raises when the model has no hook")
        serving = self._serving(call)
        if serving:
            reasons.append(serving)
        reasons += self._required_evidence(call, ids_core)  # (evidence.EvidenceMixin)
        if not reasons:
            return None
        return REQUIRED_PREFIX + "; ".join(reasons)

    # ------------------------------------------------------------------ read after
    def _read_after(self, call: cst.Call, scope: cst.CSTNode) -> bool:
        visitor = _AfterCall(call)
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        body.visit(visitor)
        return visitor.found

    # ------------------------------------------------------------------ feature flags
    def _under_flag(self, call: cst.Call) -> bool:
        child: cst.CSTNode = call
        node = self._parent(call)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, (cst.If, cst.IfExp, cst.While)) and child is node.body:
                if _negated(node.test) is None and _contains(node.test, _is_flag):
                    return True
            elif isinstance(node, cst.BooleanOperation) and child is node.right:
                if isinstance(node.operator, cst.And) and _contains(node.left, _is_flag):
                    return True
            elif isinstance(node, (cst.IndentedBlock, cst.Module)):
                if self._earlier_flag_exit(node.body, child):
                    return True
            child, node = node, self._parent(node)
        return False

    @staticmethod
    def _earlier_flag_exit(statements, current: cst.CSTNode) -> bool:
        """``if not <flag>: return`` before ``current`` in the same block."""
        for statement in statements:
            if statement is current:
                return False
            if isinstance(statement, cst.If) and statement.orelse is None:
                inner = _negated(statement.test)
                if inner is not None and _contains(inner, _is_flag):
                    if _ends_with_exit(statement.body):
                        return True
        return False

    # ------------------------------------------------------------------ lookups
    def _lookup_raises(self, call: cst.Call, scope: cst.CSTNode) -> bool:
        callee = call.func.value if isinstance(call.func, cst.Name) else None
        is_lookup = _lookup_of(self.names)
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope

        def raising_check(node: cst.CSTNode) -> bool:
            if not isinstance(node, cst.If) or not _ends_with_raise(node.body):
                return False
            inner = _negated(node.test)
            if inner is not None and _contains(inner, is_lookup):
                return True  # if not hasattr(model, "set_..."): raise
            if callee is not None and _contains(
                node.test, lambda n: isinstance(n, cst.Name) and n.value == callee
            ):
                return True  # if setter is None: raise
            return False

        if _contains(body, raising_check):
            return True
        return self._in_raising_chain(call, is_lookup)

    def _in_raising_chain(self, call: cst.Call, is_lookup) -> bool:
        """The call sits in a branch of ``if hasattr(...): ... elif ...: ... else: raise``."""
        node = self._parent(call)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, cst.If):
                head = node
                parent = self._parent(head)
                while isinstance(parent, cst.If) and parent.orelse is head:
                    head, parent = parent, self._parent(parent)
                tests: list[cst.BaseExpression] = []
                branch: cst.If | cst.Else | None = head
                while isinstance(branch, cst.If):
                    tests.append(branch.test)
                    branch = branch.orelse
                if (
                    isinstance(branch, cst.Else)
                    and _ends_with_raise(branch.body)
                    and any(_contains(test, is_lookup) for test in tests)
                ):
                    return True
            node = self._parent(node)
        return False

    # ------------------------------------------------------------------ serving code
    def _serving(self, call: cst.Call) -> str | None:
        if is_serving_path(self.path):
            return "serving code (an SGLang model runner / model_executor module)"
        node = self._parent(call)
        while node is not None:
            if isinstance(node, cst.ClassDef) and node.name.value.endswith("ModelRunner"):
                return f"serving code (class {node.name.value})"
            node = self._parent(node)
        return None


# ---------------------------------------------------------------------- binding names
def _suggested_name(expr: cst.BaseExpression) -> str | None:
    """``cfg.get("layers")`` / ``getattr(args, "layers", None)`` / ``cfg["layers"]`` ->
    ``layers``; None when the expression reads no such key."""
    key: cst.BaseExpression | None = None
    if isinstance(expr, cst.Call):
        name = last_name(expr.func)
        if name == "getattr" and len(expr.args) >= 2:
            key = expr.args[1].value
        elif name == "get" and expr.args:
            key = expr.args[0].value
    elif isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if isinstance(index, cst.Index):
            key = index.value
    if isinstance(key, cst.SimpleString):
        value = key.evaluated_value
        if isinstance(value, str) and value.isidentifier():
            return value
    return None


def binding_name(expr: cst.BaseExpression, taken: Iterable[str]) -> str:
    """A new local name for the ids ``expr`` evaluates to: from its key when it reads one
    (``cfg.get("layers")`` -> ``layers``), else ``layer_ids``; never a name already used in
    the scope, a keyword or a builtin."""
    taken = set(taken)
    base = _suggested_name(expr) or "layer_ids"
    if keyword.iskeyword(base) or hasattr(builtins, base) or base.startswith("__"):
        base = "layer_ids"
    name, number = base, 1
    while name in taken:
        number += 1
        name = f"{base}_{number}"
    return name
