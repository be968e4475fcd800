"""Claims of capture after a call: statements that say the capture is on, which a skipped or
failed call must not run, and what the failure path runs instead to say it is off.

A claim is a statement after the call that only holds when the hook took the ids: a flag about
the capture set true (``self.capture_enabled = True``, ``ok = True``: its name spells
"captur" or has a word such as aux, hidden, hook, enabled, ready, ok, success), ``return
True``, or the hook's name kept
(``capture_hook = hook_name``).  Found in the call's own block (the *tail*: the statements after
the call up to the last claim, which the rewrite runs only when the capture was set) and in the
blocks around it in the same function (a flag set after the ``if``/``else`` holding the call).

The failure path (``off``) says capture is off: each flag set ``False``, ``return False`` for
a ``return True``, and, for a claim in an enclosing block, a ``return`` that keeps the claim
from running.  For example::

    # before
    def enable(self, ids=None) -> None:
        if self.use_default_layers:
            self.model.set_eagle3_layers_to_capture(ids)
        else:
            self.model.set_dspark_layers_to_capture(ids)
        self.capture_enabled = True
    # the DSPARK call's claims: tail 0, off ("self.capture_enabled = False", "return")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from codemods.callers.analyse.scopes import AnalyzerBase
from codemods.callers.analyse.syntax import _SCOPE_NODES, _code, _key


@dataclass(frozen=True)
class Claims:
    """What follows a call that claims capture (see the module docstring)."""

    #: Statements after the call in its block, up to the last claim there.
    tail: int = 0
    #: The failure path's statements, as code (``flag = False``, ``return False``, ``return``).
    off: tuple[str, ...] = ()
    #: The tail ends the function (``return True``): the failure path may follow it.
    tail_returns: bool = False
    #: Why a claim cannot be kept consistent (a flag set after an enclosing block of a
    #: function that returns a value: no exit says capture is off); the call is for review.
    unresolved: str | None = None

    @property
    def exits(self) -> bool:
        """The failure path leaves the function: the tail may stay after the call."""
        return bool(self.off) and self.off[-1].startswith("return")


#: Words of a flag's name (split at ``_``) that make it, set true after the call, a claim of
#: capture; and any name spelling "captur".
_FLAG_WORDS = frozenset(
    {
        "aux",
        "hidden",
        "hook",
        "enabled",
        "enable",
        "active",
        "available",
        "ready",
        "on",
        "ok",
        "success",
        "succeeded",
        "done",
        "set",
        "installed",
        "attached",
    }
)


def _is_capture_flag(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Attribute):
        name = target.attr.value
    elif isinstance(target, cst.Name):
        name = target.value
    else:
        return False
    name = name.lower()
    return "captur" in name or any(word in _FLAG_WORDS for word in name.split("_"))


def _is_true(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _claim(statement: cst.CSTNode, hook_key: str | None) -> tuple[str, str | None] | None:
    """``("return", None)``, ``("flag", target)`` or ``("hook", None)`` for a claim."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    if len(statement.body) != 1:  # ``enabled = True; ...``: the same as on lines of their own
        lines = (statement.with_changes(body=[small]) for small in statement.body)
        return next((kind for kind in map(_claim_of_line(hook_key), lines) if kind), None)
    small = statement.body[0]
    if isinstance(small, cst.Return):
        return ("return", None) if _is_true(small.value) else None
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target, value = small.targets[0].target, small.value
    elif isinstance(small, cst.AnnAssign) and small.value is not None:
        target, value = small.target, small.value
    else:
        return None
    if _is_true(value):
        # a flag about the capture (``capture_enabled``, ``aux_on``, ``ok``), not any other
        # switch set after the call (``torch.backends.cudnn.benchmark``)
        if _is_capture_flag(target):
            return "flag", _code(target)
        return None
    if hook_key is not None and _key(value) == hook_key:
        return "hook", None
    return None


def _claim_of_line(hook_key: str | None):
    return lambda line: _claim(line, hook_key)


def _off(kinds: list[tuple[str, str | None]]) -> list[str]:
    lines = [f"{target} = False" for kind, target in kinds if kind == "flag"]
    return list(dict.fromkeys(lines))


def _index(statements: Sequence[cst.CSTNode], node: cst.CSTNode) -> int:
    """Where ``node`` itself is in ``statements`` (by identity)."""
    return next(index for index, item in enumerate(statements) if item is node)


def _returns_value(function: cst.FunctionDef) -> bool:
    """Some ``return <value>`` in ``function`` (nested scopes aside)."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Return) and node.value is not None:
            return True
        if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementLine)):
            stack.extend(node.body)
        elif isinstance(node, cst.BaseCompoundStatement) and not isinstance(node, _SCOPE_NODES):
            stack.append(node.body)
            orelse = getattr(node, "orelse", None)
            if orelse is not None:
                stack.append(orelse.body if isinstance(orelse, cst.Else) else orelse)
            for handler in getattr(node, "handlers", ()):
                stack.append(handler.body)
            final = getattr(node, "finalbody", None)
            if final is not None:
                stack.append(final.body)
    return False


class ClaimsMixin(AnalyzerBase):
    """The claims after a call (``self._parent``, ``self.hook_calls`` of the analyzer)."""

    def _claims(
        self, statement: cst.CSTNode | None, hook_name: cst.BaseExpression | None
    ) -> Claims | None:
        hook_key = _key(hook_name) if hook_name is not None else None
        block: cst.CSTNode | None
        after: list[cst.BaseStatement]
        if isinstance(statement, cst.SimpleStatementSuite):  # ``if ok: call()``: no tail
            block, after = statement, []
        elif isinstance(statement, cst.SimpleStatementLine):
            block = self._parent(statement)
            if not isinstance(block, (cst.IndentedBlock, cst.Module)):
                return None
            after = list(block.body)
            after = after[_index(after, statement) + 1 :]
        else:
            return None
        claimed = [(index, _claim(item, hook_key)) for index, item in enumerate(after)]
        found = [(index, kind) for index, kind in claimed if kind is not None]
        tail = found[-1][0] + 1 if found else 0
        if tail and self._holds_hook_call(after[:tail]):
            return None  # another hook call among them: left as it is
        kinds = [kind for _, kind in found]
        off = _off(kinds)
        if ("return", None) in kinds:
            return Claims(tail, (*off, "return False"), tail_returns=True)
        enclosing = self._enclosing_claims(block, hook_key)
        if enclosing:
            function, outer = enclosing
            off = list(dict.fromkeys(off + _off(outer)))
            if ("return", None) in outer:
                return Claims(tail, (*off, "return False"))
            if not _returns_value(function):
                return Claims(tail, (*off, "return"))
            flags = ", ".join(line.split(" = ")[0] for line in _off(outer))
            return Claims(
                tail,
                tuple(off),
                unresolved=f"{flags} claims capture after the block holding the call; set it "
                "only where the capture succeeds by hand",
            )
        if not tail and not off:
            return None
        return Claims(tail, tuple(off))

    def _enclosing_claims(self, block: cst.CSTNode, hook_key: str | None):
        """``(function, claims)`` found after the statements around ``block`` in its
        function; None when there are none (or the call is not in a function)."""
        kinds: list[tuple[str, str | None]] = []
        child, node = block, self._parent(block)
        while node is not None and not isinstance(node, _SCOPE_NODES):
            if isinstance(node, cst.IndentedBlock):
                statements = list(node.body)
                for item in statements[_index(statements, child) + 1 :]:
                    kind = _claim(item, hook_key)
                    if kind is not None and kind[0] != "hook":
                        kinds.append(kind)
            child, node = node, self._parent(node)
        if not kinds or not isinstance(node, cst.FunctionDef):
            return None
        return node, kinds

    def _holds_hook_call(self, statements: Sequence[cst.CSTNode]) -> bool:
        held = set(map(id, statements))
        for call in self.hook_calls:
            node = self._parent(call)
            while node is not None:
                if id(node) in held:
                    return True
                node = self._parent(node)
        return False
