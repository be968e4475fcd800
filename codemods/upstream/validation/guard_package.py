"""The runtime guard across the runner package: every file that calls a capture hook, and
the callers of a module-level function whose check reads its new ``pp_size`` parameter.

``guard_changes(tree)`` guards each runner file (``runtime_guard.guard``); where a
module-level function gets ``pp_size: int = 1`` (``configure_aux_hidden_state_capture``,
0.5.16+), ``pass_pp_size`` adds ``pp_size=<the caller's PP world size>`` to each of its
calls in the package.  Before::

    configure_aux_hidden_state_capture(
        model=self.model,
        ...
    )

after::

    configure_aux_hidden_state_capture(
        model=self.model,
        ...
        pp_size=self.pp_size,
    )
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import libcst as cst

from codemods.upstream.edit.arguments import (
    ReplaceNodes,
    callee_of,
    calls_of,
    laid_out_anew,
    with_keyword,
)
from codemods.upstream.edit.change_kinds import VALIDATION, Role
from codemods.upstream.edit.imports import add_from_import, imported_names
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.pyformat import INDENT
from codemods.upstream.edit.walk import code_of
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation.runtime_guard import (
    CALL_TEXT,
    GROUP_SIZE,
    PARAM,
    PP_GROUP,
    PP_GROUP_MODULE,
    RUNNER_PACKAGE,
    GuardResult,
    GuardSite,
    Scope,
    SizeCall,
    Unguarded,
    from_modules,
    guard,
    runner_pp_size,
)


@dataclass(frozen=True)
class PassedFile:
    text: str
    calls: tuple[SizeCall, ...]
    unguarded: tuple[Unguarded, ...]
    #: The functions called in the file (passing ``pp_size`` or not).
    callees: frozenset[str] = frozenset()


def _statements(
    body: Sequence[cst.CSTNode], scope: Scope, depth: int
) -> Iterator[tuple[cst.SimpleStatementLine, Scope, int]]:
    """Each statement line under ``body`` at any depth, with its scope and block depth."""
    for index, statement in enumerate(body):
        inner = scope
        if scope.method is not None and depth == scope.method_depth:
            inner = replace(scope, top=index)
        if isinstance(statement, cst.SimpleStatementLine):
            yield statement, inner, depth
        elif isinstance(statement, (cst.ClassDef, cst.FunctionDef)):
            yield from _suite(statement.body, inner.entered(statement, depth), depth)
        else:
            for child in statement.children:
                if isinstance(child, cst.BaseSuite):
                    yield from _suite(child, inner, depth)
                elif isinstance(child, cst.BaseCompoundStatement):
                    yield from _statements([child], inner, depth)
                elif isinstance(child, (cst.Else, cst.ExceptHandler, cst.Finally)):
                    yield from _statements([child], inner, depth)


def _suite(
    suite: cst.BaseSuite, scope: Scope, depth: int
) -> Iterator[tuple[cst.SimpleStatementLine, Scope, int]]:
    if isinstance(suite, cst.IndentedBlock):
        yield from _statements(suite.body, scope, depth + 1)


def pass_pp_size(source: str, path: str, functions: frozenset[str]) -> PassedFile:
    """``source`` with ``pp_size=<the caller's PP world size>`` in each call of a function
    in ``functions``: the runner's own (:func:`runner_pp_size`), else
    ``get_pp_group().world_size``.  A call that passes it already is left alone; one that
    passes ``**kwargs``, is outside a function, or has a layout this cannot extend is
    reported, and nothing changes then."""
    module = parse_text(source)
    pattern = re.compile(
        r"(?<!def )(?<![\w])(?:" + "|".join(map(re.escape, sorted(functions))) + r")\s*\("
    )
    lines = [source.count("\n", 0, f.start()) + 1 for f in pattern.finditer(source)]
    order = {id(call): n for n, call in enumerate(calls_of(module, functions))}
    calls: list[SizeCall] = []
    unguarded: list[Unguarded] = []
    replacements: dict[int, cst.CSTNode] = {}
    seen: set[int] = set()
    for statement, scope, depth in _statements(module.body, Scope(), 0):
        for call in calls_of(statement, functions):
            seen.add(id(call))
            n = order.get(id(call), -1)
            line = lines[n] if 0 <= n < len(lines) else 0
            function = ".".join(scope.names)
            callee = callee_of(call)
            if not scope.names:
                unguarded.append(Unguarded(path, line, function, "outside a function body"))
                continue
            keywords = [a.keyword.value for a in call.args if a.keyword is not None]
            if PARAM in keywords:
                value = next(
                    code_of(a.value) for a in call.args if a.keyword and a.keyword.value == PARAM
                )
                calls.append(SizeCall(path, line, function, callee, value, True))
                continue
            if any(a.star == "**" for a in call.args):
                why = f"the call of {callee} passes **kwargs, so pp_size cannot be added"
                unguarded.append(Unguarded(path, line, function, why))
                continue
            value = runner_pp_size(scope) or GROUP_SIZE
            extended = with_keyword(call, PARAM, value)
            if extended is not None:
                replacements[id(call)] = extended
            else:
                laid_out = laid_out_anew(statement, call, PARAM, value, INDENT * depth)
                if laid_out is None or id(statement) in replacements:
                    why = f"the call of {callee} cannot be laid out again with pp_size"
                    unguarded.append(Unguarded(path, line, function, why))
                    continue
                replacements[id(statement)] = laid_out
            calls.append(SizeCall(path, line, function, callee, value, False))
    callees = frozenset(callee_of(call) for call in calls_of(module, functions))
    for call in calls_of(module, functions):
        if id(call) not in seen:
            n = order.get(id(call), -1)
            line = lines[n] if 0 <= n < len(lines) else 0
            unguarded.append(Unguarded(path, line, "", "the call is part of a statement's header"))
    if unguarded or not replacements:
        return PassedFile(source, tuple(calls), tuple(unguarded), callees)
    module = module.visit(ReplaceNodes(replacements))
    if any(c.pp_size == GROUP_SIZE and not c.passed for c in calls):
        bound = any(PP_GROUP in imported_names(module, name) for name in from_modules(module))
        if not bound:
            module = add_from_import(module, PP_GROUP_MODULE, [PP_GROUP])
    return PassedFile(module.code, tuple(calls), tuple(unguarded), callees)


def _package(tree: SGLangTree) -> str:
    return tree.module_path(f"{RUNNER_PACKAGE}.__init__").rsplit("/", 1)[0]


def _package_files(tree: SGLangTree) -> list[str]:
    """Patch paths of the runner package's Python files."""
    package = _package(tree)
    folder = tree.file(package)
    if not folder.is_dir():
        return []
    return [f"{package}/{f.relative_to(folder).as_posix()}" for f in sorted(folder.rglob("*.py"))]


def runner_files(tree: SGLangTree, read: Callable[[str], str | None] | None = None) -> list[str]:
    """Patch paths of the runner package's files that mention a capture hook call."""
    read = read or tree.read_text
    return [path for path in _package_files(tree) if CALL_TEXT.search(read(path) or "")]


def guard_changes(tree: SGLangTree, base: Callable[[str], str | None] | None = None) -> GuardResult:
    """The runner files with the check after each capture hook call, the calls, and the
    calls no check can be put after (then no file is changed).  A module-level function
    whose check reads its new parameter ``pp_size`` gets it from each of its calls in the
    runner package (``pass_pp_size``); one without such a call cannot be guarded.

    ``base``: a file's text as the parts decided so far leave it (``Plan.text``), which
    the guard builds on; by default the tree's own."""
    read = base or tree.read_text
    package = _package(tree)
    sites: list[GuardSite] = []
    unguarded: list[Unguarded] = []
    texts: dict[str, str] = {}
    functions: set[str] = set()
    for path in runner_files(tree, read):
        source = read(path)
        assert source is not None
        done = guard(source, path)
        sites += done.sites
        unguarded += done.unguarded
        functions.update(done.functions)
        texts[path] = done.text
    callers: list[SizeCall] = []
    called: set[str] = set()
    if functions:
        names = frozenset(functions)
        word = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
        for path in _package_files(tree):
            source = texts.get(path, read(path))
            if source is None or not word.search(source):
                continue
            passed = pass_pp_size(source, path, names)
            callers += passed.calls
            called |= passed.callees
            unguarded += passed.unguarded
            texts[path] = passed.text
        for name in sorted(names - called):
            site = next(s for s in sites if s.function == name)
            why = f"no call of {name} under {package} to pass it pp_size"
            unguarded.append(Unguarded(site.path, site.line, name, why))
    changes: list[FileChange] = []
    if not unguarded:
        for path, text in texts.items():
            if text == read(path):
                continue
            changes.append(
                FileChange(path, tree.read_text(path), text, VALIDATION, Role.RUNTIME_GUARD)
            )
    return GuardResult(
        tuple(sites),
        tuple(unguarded),
        tuple(c for c in changes if c.changed),
        package,
        tuple(callers),
    )
