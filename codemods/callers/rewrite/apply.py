"""Apply the caller codemods to one analysed module, recording what each one did.

before: the file's bytes and the :class:`~codemods.callers.analyse.Analysis` of its module (one
        parse, one discovery).
after:  the rewritten bytes and one :class:`~codemods.callers.records.Step` per codemod that ran.

The registry's codemods run in its order.  The first that has call sites to rewrite works from
the analysis; each later one works on the output of the one before it, so its step (like a
patch in a series) is described against that output.  Instead of discovering that module
again, the analysis is carried over: a codemod reports where each call a later codemod
rewrites ended up (and every node it rebuilt), and one generation of its output gives those
calls' new positions.  Each codemod visits only the paths from the module to the calls.  A
module whose rewritable call shares a line with other statements is split first and analysed
again (the one case with a second discovery).
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import libcst as cst

from codemods.callers.analyse import Analysis, FoundCall
from codemods.callers.analyse.positions import code_and_positions
from codemods.callers.options import TransformOptions
from codemods.callers.records import Action, CallSite, Step
from codemods.callers.rewrite import host_style, registry
from codemods.callers.rewrite.callsite_codemod import CallSiteCodemod
from codemods.callers.rewrite.split import analyse_split


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _only_call(statement: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> cst.Call:
    expr = statement.body[0]
    assert isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call)
    return expr.value


def _statement(found: FoundCall) -> cst.SimpleStatementLine | cst.SimpleStatementSuite:
    """The statement holding only ``found``'s call: every call a codemod rewrites has one
    (:meth:`CallSiteCodemod.applies`)."""
    if found.statement is None:
        raise ValueError(f"{found.site.path}:{found.site.line}: the call is not a statement")
    return found.statement


def _transformer(entry: registry.Entry) -> type[CallSiteCodemod]:
    """The entry's transformer class: a :class:`CallSiteCodemod` (the registry loads it
    without importing LibCST, so it says only ``type``)."""
    return cast(type[CallSiteCodemod], entry.load())


def _wrappers(node: object, target: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The nodes a codemod put around ``target`` (``node`` is what replaced the statement)."""
    if node is target:
        return [target]
    if isinstance(node, cst.FlattenSentinel):
        children: list[object] = list(node.nodes)
    elif isinstance(node, cst.IndentedBlock):
        children = list(node.body)
    elif isinstance(node, (cst.If, cst.Try)):
        children = [node.body]
    else:
        return None
    for child in children:
        inner = _wrappers(child, target)
        if inner is not None:
            return ([node] if isinstance(node, cst.CSTNode) else []) + inner
    return None


def _top_index(body: list[cst.BaseStatement], candidates: list[object]) -> int:
    for candidate in candidates:
        for index, statement in enumerate(body):
            if statement is candidate:
                return index
    raise LookupError("statement not found at module level")


def _carry_over(
    before: cst.Module,
    reach: set[cst.CSTNode],
    codemod: CallSiteCodemod,
    mine: tuple[FoundCall, ...],
    after: cst.Module,
    follow: tuple[FoundCall, ...],
) -> tuple[str, tuple[FoundCall, ...], set[cst.CSTNode]]:
    """The code of ``after`` (``codemod``'s output for ``before``), ``follow`` described in
    ``after``, and the paths to them there (``reach``: the paths to them in ``before``)."""
    rebuilt = codemod.rebuilt
    moved = {found: codemod.moved.get(_statement(found), _statement(found)) for found in follow}
    calls = {found: _only_call(statement) for found, statement in moved.items()}
    code, positions = code_and_positions(after, [*moved.values(), *calls.values()])
    paths: set[cst.CSTNode] = {after}
    for node in reach:
        # (a node replaced by several, or removed: the visit enters only nodes)
        replaced = rebuilt.get(node, node)
        if isinstance(replaced, cst.CSTNode):
            paths.add(replaced)
    carried = []
    targets = {id(found) for found in mine}
    for found in follow:
        statement, call = moved[found], calls[found]
        rewritten = statement is not found.statement and id(found) in targets
        if rewritten:
            paths.update(_wrappers(rebuilt[_statement(found)], statement) or [statement])
        paths.update((statement, statement.body[0], call))
        top = rebuilt.get(before.body[found.module_index])
        candidates: list[object] = [statement]
        if isinstance(top, cst.FlattenSentinel):
            candidates += list(top.nodes)[::-1]
        else:
            candidates.append(top if top is not None else before.body[found.module_index])
        ids_source, ids_arg = found.site.ids_source, found.ids_arg
        if found.ids_arg is not None:
            index = next(i for i, arg in enumerate(found.call.args) if arg is found.ids_arg)
            ids_arg = call.args[index]
            ids_source = _code(ids_arg.value)
        site: CallSite = replace(
            found.site,
            line=positions[call].line,
            column=positions[call].column + 1,
            ids_source=ids_source,
        )
        if rewritten:
            site = codemod.carried_site(site)
        column = (
            positions[statement].column
            if isinstance(statement, cst.SimpleStatementLine)
            else found.statement_column
        )
        carried.append(
            replace(
                found,
                call=call,
                ids_arg=ids_arg,
                site=site,
                statement=statement,
                statement_column=column,
                module_index=_top_index(list(after.body), candidates),
            )
        )
    return code, tuple(carried), paths


def rewrite(
    source: bytes, analysis: Analysis, path: str, options: TransformOptions
) -> tuple[bytes, tuple[Step, ...]]:
    """``source`` (whose module ``analysis`` describes) with the registry's codemods applied
    in order."""
    original_sites = analysis.sites
    analysis = analyse_split(analysis.module, options.hooks, path, analysis)
    encoding = analysis.module.encoding
    codemods = [(entry, _transformer(entry)) for entry in registry.ENTRIES]
    found = analysis.found
    if not any(cls.targets(found) for _, cls in codemods):
        return analysis.module.bytes, ()
    limit = options.line_length
    if limit is None:
        limit = host_style.file_line_length(path)
    steps: list[Step] = []
    module, before = analysis.module, source
    # Paths to the calls still to rewrite, in ``module`` (None: from the analysis).
    reach: set[cst.CSTNode] | None = None
    for position, (entry, cls) in enumerate(codemods):
        mine = cls.targets(found)
        if not mine:
            continue
        later = [later_cls for _, later_cls in codemods[position + 1 :]]
        follow = tuple(item for item in found if any(c.applies(item) for c in later))
        if reach is None:
            paths = analysis.paths_to(cls.path_nodes(mine))
            reach = analysis.paths_to(
                item.statement for item in follow if item.statement is not None
            )
            action = Action(entry.action)
            sites = tuple(site for site in original_sites if action in site.actions)
        else:
            paths = reach
            sites = tuple(item.site for item in mine)
        codemod = cls(path, options.policy(entry.metadata), options.extra_hooks, limit)
        rewritten = codemod.rewrite_calls(module, mine, paths, follow)
        if follow:
            code, found, reach = _carry_over(module, reach, codemod, mine, rewritten, follow)
            after = code.encode(encoding)
        else:
            found, after = (), rewritten.bytes
        steps.append(Step(entry.action, before, after, sites))
        module, before = rewritten, after
    return before, tuple(steps)
