"""One setter walked the way it would run: under PP (a non-last and the last rank, with a list
of ids) or with ``None`` ids (no PP), to the first event that decides what it does (a
``raise`` or failing ``assert``, a ``return``, a call of a hook on a delegate, a default for the
ids, or the ids used as a list).  Tests the walk cannot decide are taken as false."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from codemods.catalog.derive.index import ClassKey, ModelIndex
from codemods.catalog.hooks import HOOK_NAME_PATTERN

#: Every capture hook SGLang defines follows this spelling (the catalog's pattern).
HOOK_RE = HOOK_NAME_PATTERN
_PP_NAME_RE = re.compile(r"(^|_)pp($|_)|pipeline")
_PP_SIZE_RE = re.compile(r"^(pp_size|pp_world_size|pipeline_parallel_size)$")


@dataclass(frozen=True)
class _Scenario:
    pp: bool
    last_rank: bool
    ids_none: bool


_PP_NON_LAST = _Scenario(pp=True, last_rank=False, ids_none=False)
_PP_LAST = _Scenario(pp=True, last_rank=True, ids_none=False)
_NONE = _Scenario(pp=False, last_rank=True, ids_none=True)


@dataclass
class _Event:
    kind: str  # raise | return | delegate | default | uses
    exc: str | None = None
    message: str | None = None
    call: ast.Call | None = None


def _mentions_pp(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.attr if isinstance(sub, ast.Attribute) else getattr(sub, "id", None)
        if isinstance(name, str) and (
            _PP_NAME_RE.search(name) or name in ("is_last_rank", "is_first_rank")
        ):
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            if sub.func.id == "get_pp_group":
                return True
    return False


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


def _message(exc: ast.expr | None) -> tuple[str, str | None]:
    if exc is None:
        return "", None
    call = exc if isinstance(exc, ast.Call) else None
    func = call.func if call else exc
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if call is None or not call.args:
        return name, None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return name, arg.value
    return name, ast.unparse(arg)


class _Walker:
    def __init__(self, index: ModelIndex, cls: ClassKey, func: ast.FunctionDef):
        self.index = index
        self.cls = cls
        self.func = func
        args = func.args.posonlyargs + func.args.args
        self.param = args[1].arg if len(args) > 1 else None

    # -- tests
    def _is_param(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == self.param

    def _is_pp_size(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "world_size":
            return _mentions_pp(node.value)
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        return bool(_PP_SIZE_RE.match(name or ""))

    def evaluate(self, test: ast.expr, scen: _Scenario) -> bool | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return _not(self.evaluate(test.operand, scen))
        if isinstance(test, ast.BoolOp):
            values = [self.evaluate(v, scen) for v in test.values]
            if isinstance(test.op, ast.Or):
                return (
                    True if True in values else (False if all(v is False for v in values) else None)
                )
            return False if False in values else (True if all(v is True for v in values) else None)
        if self._is_param(test):
            return not scen.ids_none
        if isinstance(test, ast.Attribute) and test.attr == "is_last_rank":
            return scen.last_rank if scen.pp else True
        if isinstance(test, ast.Attribute) and test.attr == "is_first_rank":
            return None if scen.pp else True
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if self._is_param(left) and isinstance(right, ast.Constant) and right.value is None:
                if isinstance(op, (ast.Is, ast.Eq)):
                    return scen.ids_none
                if isinstance(op, (ast.IsNot, ast.NotEq)):
                    return not scen.ids_none
            if (
                self._is_pp_size(left)
                and isinstance(right, ast.Constant)
                and isinstance(right.value, int)
            ):
                size, bound = (2 if scen.pp else 1), right.value
                compare = {
                    ast.Gt: size > bound,
                    ast.GtE: size >= bound,
                    ast.Lt: size < bound,
                    ast.LtE: size <= bound,
                    ast.Eq: size == bound,
                    ast.NotEq: size != bound,
                }
                return compare.get(type(op))
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "hasattr"
            and len(test.args) == 2
            and isinstance(test.args[1], ast.Constant)
            and isinstance(test.args[1].value, str)
        ):
            # The ordinary path: the inner model has the hook (a delegate that cannot be
            # resolved is reported as such where it is called).
            if HOOK_RE.match(test.args[1].value):
                return True
        return None

    def receiver_classes(self, node: ast.expr) -> list[ClassKey] | None:
        if isinstance(node, ast.Name) and node.id == "self":
            return [self.cls]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            return self.index.attribute_classes(self.cls, node.attr)
        return None

    # -- walk
    def run(self, stmts: list[ast.stmt], scen: _Scenario, state: dict) -> _Event | None:
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                value = self.evaluate(stmt.test, scen)
                if value is None and scen.ids_none and self._tests_ids(stmt.test):
                    return _Event("uses")  # e.g. ``if sorted(ids) != ids``: None as a list
                branch = stmt.body if value is True else stmt.orelse
                skipped = stmt.orelse if value is True else stmt.body
                if value is not None and skipped and _mentions_pp(stmt.test) and scen.pp:
                    state["pp_skipped"] = True
                none_branch = (
                    scen.ids_none
                    and value is not None
                    and bool(branch)
                    and self._tests_ids(stmt.test)
                )
                event = self.run(branch, scen, state)
                if event is not None:
                    return event
                if none_branch:
                    return _Event("default")
            elif isinstance(stmt, ast.Assert):
                if self.evaluate(stmt.test, scen) is False:
                    msg = stmt.msg
                    text = (
                        msg.value
                        if isinstance(msg, ast.Constant) and isinstance(msg.value, str)
                        else ast.unparse(msg)
                        if msg is not None
                        else None
                    )
                    return _Event("raise", exc="AssertionError", message=text)
            elif isinstance(stmt, ast.Raise):
                exc, message = _message(stmt.exc)
                return _Event("raise", exc=exc, message=message)
            elif isinstance(stmt, ast.Return):
                return _Event("return")
            elif isinstance(stmt, (ast.Try, ast.With, ast.For, ast.While)):
                event = self.run(stmt.body, scen, state)
                if event is not None:
                    return event
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = stmt.value.func
                if isinstance(func, ast.Attribute) and HOOK_RE.match(func.attr):
                    # With None ids only a call that passes them on decides what None means;
                    # a call with ids computed here is the setter's own work.
                    if not scen.ids_none or self.passes_ids(stmt.value):
                        return _Event("delegate", call=stmt.value)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and scen.ids_none:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(self._is_param(t) for t in targets) and stmt.value is not None:
                    # Rebinding the ids: from themselves (``tuple(ids)``) uses None as a
                    # list; from anything else gives them a default.
                    uses = any(self._is_param(n) for n in ast.walk(stmt.value))
                    return _Event("uses" if uses else "default")
        return None

    def passes_ids(self, call: ast.Call) -> bool:
        return any(self._is_param(a) for a in call.args[:1]) or any(
            self._is_param(k.value) for k in call.keywords
        )

    def _tests_ids(self, test: ast.expr) -> bool:
        return any(self._is_param(n) for n in ast.walk(test))
