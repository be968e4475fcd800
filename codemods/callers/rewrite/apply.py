"""Apply the caller codemods to one analysed module, recording what each one did.

before: the file's bytes and the :class:`~codemods.callers.analyse.Analysis` of its module (one
        parse, one discovery).
after:  the rewritten bytes and one :class:`~codemods.callers.records.Step` per codemod that ran.

The guard rewrites from the analysis.  The fallback then works on the guarded module, so its
step (like a patch in a series) is described against the guarded file; instead of discovering
that module again, the analysis is carried over: the guard reports where each call it touched
or passed ended up, and one generation of the guarded code gives those calls' new positions.
Both codemods visit only the paths from the module to their calls.  A module whose rewritable
call shares a line with other statements is split first and analysed again (the one case with
a second discovery).
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from codemods.callers.analyse import Analysis, FoundCall
from codemods.callers.analyse.positions import code_and_positions
from codemods.callers.options import TransformOptions
from codemods.callers.records import Action, CallSite, Risk, Step
from codemods.callers.rewrite import host_style
from codemods.callers.rewrite.fallback import FallbackTransformer
from codemods.callers.rewrite.guard import GuardTransformer
from codemods.callers.rewrite.split import analyse_split


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _only_call(statement: cst.SimpleStatementLine | cst.SimpleStatementSuite) -> cst.Call:
    expr = statement.body[0]
    assert isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call)
    return expr.value


def _wrappers(node: object, target: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The nodes a guard put around ``target`` (``node`` is what replaced the statement)."""
    if node is target:
        return [target]
    if isinstance(node, cst.FlattenSentinel):
        children: list[object] = list(node.nodes)
    elif isinstance(node, cst.IndentedBlock):
        children = list(node.body)
    elif isinstance(node, cst.If):
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
    analysis: Analysis, guard: GuardTransformer, guarded: cst.Module, follow: tuple[FoundCall, ...]
) -> tuple[str, tuple[FoundCall, ...], set[cst.CSTNode]]:
    """The guarded code, ``follow`` described in ``guarded``, and the paths to them there."""
    moved = {found: guard.moved.get(found.statement, found.statement) for found in follow}
    calls = {found: _only_call(statement) for found, statement in moved.items()}
    code, positions = code_and_positions(guarded, [*moved.values(), *calls.values()])
    originals = [found.statement for found in follow if found.statement is not None]
    paths = {guard.rebuilt.get(node, node) for node in analysis.paths_to(originals)}
    paths.add(guarded)
    carried = []
    for found in follow:
        statement, call = moved[found], calls[found]
        was_guarded = statement is not found.statement and Action.GUARD in found.site.actions
        if was_guarded:
            paths.update(_wrappers(guard.rebuilt[found.statement], statement) or [statement])
        top = guard.rebuilt.get(analysis.module.body[found.module_index])
        candidates: list[object] = [statement]
        if isinstance(top, cst.FlattenSentinel):
            candidates += list(top.nodes)[::-1]
        else:
            candidates.append(top if top is not None else analysis.module.body[found.module_index])
        ids_source = found.site.ids_source
        if found.ids_arg is not None:
            index = next(i for i, arg in enumerate(found.call.args) if arg is found.ids_arg)
            ids_source = _code(call.args[index].value)
        site: CallSite = replace(
            found.site,
            line=positions[call].line,
            column=positions[call].column + 1,
            ids_source=ids_source,
        )
        if was_guarded:
            risks = tuple(risk for risk in site.risks if risk is not Risk.MAYBE_NONE)
            site = replace(
                site,
                risks=risks or (Risk.SAFE,),
                guarded=True,
                note="",
                actions=tuple(a for a in site.actions if a is not Action.GUARD) or (Action.NONE,),
            )
        column = (
            positions[statement].column
            if isinstance(statement, cst.SimpleStatementLine)
            else found.statement_column
        )
        carried.append(
            replace(
                found,
                call=call,
                site=site,
                statement=statement,
                statement_column=column,
                module_index=_top_index(list(guarded.body), candidates),
            )
        )
    return code, tuple(carried), paths


def rewrite(
    source: bytes, analysis: Analysis, path: str, options: TransformOptions
) -> tuple[bytes, tuple[Step, ...]]:
    """``source`` (whose module ``analysis`` describes) with both codemods applied."""
    original_sites = analysis.sites
    analysis = analyse_split(analysis.module, options.hooks, path, analysis)
    encoding = analysis.module.encoding
    guarding = GuardTransformer.targets(analysis.found)
    follow = FallbackTransformer.targets(analysis.found)
    steps: list[Step] = []
    module = analysis.module
    limit = options.line_length
    if limit is None and (guarding or follow):
        limit = host_style.file_line_length(path)
    before = source
    if guarding:
        guard = GuardTransformer(path, options.guard_policy, options.extra_hooks, limit)
        guarded = guard.apply(analysis, follow)
        code, follow, paths = _carry_over(analysis, guard, guarded, follow)
        after = code.encode(encoding)
        sites = tuple(site for site in original_sites if Action.GUARD in site.actions)
        steps.append(Step(Action.GUARD.value, before, after, sites))
        module, before = guarded, after
        fallback_sites = tuple(found.site for found in follow)
    else:
        statements = [found.statement for found in follow if found.statement is not None]
        paths = analysis.paths_to(statements)
        fallback_sites = tuple(s for s in original_sites if Action.FALLBACK in s.actions)
    if follow:
        fallback = FallbackTransformer(
            path, options.fallback_policy, options.extra_hooks, limit
        )
        module = fallback.apply(module, follow, paths)
        after = module.bytes
        steps.append(Step(Action.FALLBACK.value, before, after, fallback_sites))
    else:
        after = before if guarding else module.bytes
    return after, tuple(steps)
