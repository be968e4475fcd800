"""Claims after a call run only when the capture was set: the guard and the fallback take the
call's *tail* (:class:`codemods.callers.analyse.claims.Claims`: the statements after it in its
block, up to the last that claims capture) into the statement they build around the call.

before (the block holding the call, after the codemod rewrote the call's own statement)::

    if ids:                       # the guard's check, holding the call
        model.set_x(list(ids))
    self.capture_enabled = True   # the tail: one statement

after::

    if ids:
        model.set_x(list(ids))
        self.capture_enabled = True
    else:
        self.capture_enabled = False   # the failure path (added by the guard itself)

The fallback takes the tail into its ``try``'s ``else:`` (where its handler does not leave the
function).  ``rebuilt`` is kept pointing at the statement that holds the call, so the codemods
after it still reach the call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst


class TailsMixin:
    """Mixed into a :class:`~codemods.callers.rewrite.callsite_codemod.CallSiteCodemod`."""

    #: The codemod's record of what replaced each node it visited.
    rebuilt: dict[cst.CSTNode, object]

    def _expect_tail(
        self,
        original: cst.CSTNode,
        produced: cst.BaseStatement,
        count: int,
        attach: Callable[[cst.BaseStatement, list[cst.BaseStatement]], list[cst.BaseStatement]],
    ) -> None:
        """``produced`` (what replaced ``original``) takes the ``count`` statements after it:
        ``attach(produced, taken)`` gives the statements that replace them all."""
        tails = self.__dict__.setdefault("_tails", {})
        tails[id(produced)] = (produced, original, count, attach)

    def _pull_tails(self, body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        tails = self.__dict__.get("_tails") or {}
        statements, out, index = list(body), [], 0
        while index < len(statements):
            statement = statements[index]
            entry = tails.get(id(statement))
            if entry is None or entry[0] is not statement:
                out.append(statement)
                index += 1
                continue
            _, original, count, attach = entry
            taken = statements[index + 1 : index + 1 + count]
            new = attach(statement, taken)  # the statement holding the call first
            self._replace_rebuilt(original, statement, new[0])
            out.extend(new)
            index += 1 + len(taken)
        return out

    def _replace_rebuilt(self, original, old, new) -> None:
        rebuilt = self.rebuilt.get(original)
        if rebuilt is old:
            self.rebuilt[original] = new
        elif isinstance(rebuilt, cst.FlattenSentinel):
            self.rebuilt[original] = cst.FlattenSentinel(
                [new if node is old else node for node in rebuilt.nodes]
            )

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if not self.__dict__.get("_tails"):
            return updated_node
        return updated_node.with_changes(body=self._pull_tails(updated_node.body))

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.__dict__.get("_tails"):
            return updated_node
        return updated_node.with_changes(body=self._pull_tails(updated_node.body))


def off_statements(
    lines: Sequence[str], config: cst.PartialParserConfig
) -> list[cst.BaseStatement]:
    """The failure path's statements (``flag = False``, ``return False``), parsed."""
    return [cst.parse_statement(f"{line}\n", config=config) for line in lines]
