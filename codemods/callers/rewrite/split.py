"""Give hook calls that share a line with other statements a line of their own.

The guard and fallback codemods rewrite whole statements; a hook call written between
semicolons, or among several statements after a colon, is first moved onto its own line.
Statement order is kept, so behaviour is unchanged, and only lines holding such a call are
touched::

    # before
    prepare(); model.set_dspark_layers_to_capture(ids); report()
    if ok: prepare(); model.set_dspark_layers_to_capture(ids)
    # after
    prepare()
    model.set_dspark_layers_to_capture(ids)
    report()
    if ok:
        prepare()
        model.set_dspark_layers_to_capture(ids)
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from codemods.callers.analyse import Analysis, analyse
from codemods.callers.rewrite import registry
from codemods.catalog.hooks import HookSet


def _groups(
    body: Sequence[cst.BaseSmallStatement], targets: set[int]
) -> list[list[cst.BaseSmallStatement]]:
    """Consecutive statements, with each target statement in a group of its own."""
    groups: list[list[cst.BaseSmallStatement]] = []
    current: list[cst.BaseSmallStatement] = []
    for index, statement in enumerate(body):
        if index in targets:
            if current:
                groups.append(current)
                current = []
            groups.append([statement])
        else:
            current.append(statement)
    if current:
        groups.append(current)
    return groups


def _lines(
    body: Sequence[cst.BaseSmallStatement], targets: set[int]
) -> list[cst.SimpleStatementLine]:
    lines = []
    for group in _groups(body, targets):
        group[-1] = group[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        lines.append(cst.SimpleStatementLine(body=group))
    return lines


class _Splitter(cst.CSTTransformer):
    def __init__(self, calls: set[cst.Call]) -> None:
        super().__init__()
        self.calls = calls

    def _targets(self, node: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> set[int]:
        if len(node.body) < 2:
            return set()
        return {
            index
            for index, small in enumerate(node.body)
            if isinstance(small, cst.Expr) and small.value in self.calls
        }

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        targets = self._targets(original_node)
        if not targets:
            return updated_node
        lines = _lines(updated_node.body, targets)
        lines[0] = lines[0].with_changes(leading_lines=updated_node.leading_lines)
        lines[-1] = lines[-1].with_changes(trailing_whitespace=updated_node.trailing_whitespace)
        return cst.FlattenSentinel(lines)

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        targets = self._targets(original_node)
        if not targets:
            return updated_node
        lines = _lines(updated_node.body, targets)
        lines[-1] = lines[-1].with_changes(trailing_whitespace=updated_node.trailing_whitespace)
        return cst.IndentedBlock(body=lines)


def split_shared_lines(analysis: Analysis) -> cst.Module:
    """The module with every rewritable hook call that shares a line moved onto its own."""
    calls = {
        found.call
        for found in analysis.found
        if found.statement is None
        and found.shared_line
        and any(action in registry.ACTIONS for action in found.site.actions)
    }
    if not calls:
        return analysis.module
    return analysis.module.visit(_Splitter(calls))


def analyse_split(
    module: cst.Module, hooks: HookSet, path: str = "<string>", analysis: Analysis | None = None
) -> Analysis:
    """The analysis the codemods work from: ``analysis`` of ``module`` (made here when not
    given), or, when a rewritable call shares its line, that of the module with such lines
    split (the only case a module is analysed twice)."""
    analysis = analysis or analyse(module, path, hooks)
    split = split_shared_lines(analysis)
    if split is analysis.module:
        return analysis
    return analyse(split, path, hooks)
