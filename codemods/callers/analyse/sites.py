"""Call-site assembly: one :class:`FoundCall` (and its :class:`~codemods.callers.records.CallSite`)
per hook call, the module's :class:`Analysis`, and the public entry points."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper

from codemods.callers.analyse.claims import Claims, ClaimsMixin
from codemods.callers.analyse.contexts import ContextsMixin
from codemods.callers.analyse.evidence import EvidenceMixin
from codemods.callers.analyse.nullness import NullnessMixin
from codemods.callers.analyse.positions import code_and_positions
from codemods.callers.analyse.pp_pinned import pins_pp_size_one
from codemods.callers.analyse.required import RequiredMixin, binding_name
from codemods.callers.analyse.scopes import _ScopeCollector
from codemods.callers.analyse.syntax import (
    _code,
    _is_none,
    _is_repeatable,
    _key,
    _unwrap_container,
)
from codemods.callers.analyse.values import ValuesMixin
from codemods.callers.records import Action, CallSite, Risk, SiteFacts, is_skipped
from codemods.callers.rewrite import registry
from codemods.callers.scope import mark_skipped, skip_expected_errors
from codemods.catalog.hooks import DEFAULT_HOOKS, Hook, HookSet
from codemods.catalog.pp_raise import loses_captures_silently, pp_hint, raising_hooks


@dataclass(frozen=True)
class FoundCall:
    """One hook call in a parsed module, with the nodes a codemod needs to rewrite it."""

    call: cst.Call
    site: CallSite
    hooks: tuple[Hook, ...]
    #: The statement holding only this call, when the call is a statement of its own: a line,
    #: or the one-line body of a compound statement (``if ok: model.set_x(ids)``).
    statement: cst.SimpleStatementLine | cst.SimpleStatementSuite | None
    #: The argument carrying the ids, and the expression checked for ``None`` (``x`` in
    #: ``list(x)``).
    ids_arg: cst.Arg | None
    ids_core: cst.BaseExpression | None
    #: Column (0-based) where the statement starts, once on a line of its own.
    statement_column: int = 0
    #: Index in ``module.body`` of the top-level statement that contains the call.
    module_index: int = 0
    #: Names used in the function (or module) around the call: new names must avoid them.
    names_in_scope: frozenset[str] = frozenset()
    #: The call is a whole statement on a line shared with other statements
    #: (``a(); model.set_x(ids)``); ``codemods.callers.rewrite.split`` gives it a line of its own.
    shared_line: bool = False
    #: For a call that may reach both a hook accepting ``None`` (EAGLE3) and one rejecting
    #: it: the expression that holds the resolved hook name at the call (``name`` in
    #: ``getattr(model, name)(ids)``), which the guard tests at run time.
    name_expr: cst.BaseExpression | None = None
    #: The code needs the capture (:mod:`codemods.callers.analyse.required`): unset ids fail early
    #: whatever the guard policy, and no fallback swallows the error.
    required: bool = False
    #: For ids passed as an expression (``cfg.get("layers")``): the new local name the guard
    #: binds them to before testing them.
    bind_name: str | None = None
    #: For a call that may reach several hooks: the expression holding the name of the one
    #: called (what the fallback's warning names), when one holds it at the call.
    hook_name: cst.BaseExpression | None = None
    #: Statements after the call that claim capture, and the failure path that says it is off
    #: (:mod:`codemods.callers.analyse.claims`); None when nothing claims it.
    claims: Claims | None = None

    @property
    def rejects_none(self) -> bool:
        return any(not hook.accepts_none for hook in self.hooks)

    @property
    def lenient_names(self) -> tuple[str, ...]:
        """The hooks this call may reach that accept ``None`` (EAGLE3: default layers)."""
        return tuple(hook.name for hook in self.hooks if hook.accepts_none)


class _Analyzer(
    ValuesMixin,
    NullnessMixin,
    ContextsMixin,
    RequiredMixin,
    EvidenceMixin,
    ClaimsMixin,
):
    """Discovery for one module: resolution of hook names, ids, guards and handlers."""

    def __init__(self, wrapper: MetadataWrapper, path: str, hooks: HookSet) -> None:
        self.module = wrapper.module
        self.path = path
        self.hooks = hooks
        self.names = hooks.names
        self._wrapper = wrapper
        collector = _ScopeCollector(self.module)
        collector.walk(self.module)
        self.scopes = collector.scopes
        self.calls = collector.calls
        self.parents = collector.parents
        self.imports = collector.imports
        self.capture_reads = collector.capture_reads

    @functools.cached_property
    def pp_pinned_off(self) -> bool:
        """The module sets ``pp_size`` to the literal 1 wherever it sets it (``pp_pinned``)."""
        return pins_pp_size_one(self.parents)

    @functools.cached_property
    def positions(self):
        """Where the hook calls and their statements start (only those nodes)."""
        return code_and_positions(self.module, self._position_targets(self.hook_calls))[1]

    @functools.cached_property
    def hook_calls(self) -> list[cst.Call]:
        """The calls that reach a hook, outside the hooks' own definitions."""
        return [
            call
            for call in self.calls
            if self._resolve_callee(call, self._scope_chain(call)) is not None
            and not self._delegates(call)
        ]

    def _position_targets(self, calls: Iterable[cst.Call]) -> list[cst.CSTNode]:
        targets: list[cst.CSTNode] = []
        for call in calls:
            targets.append(call)
            statement, _ = self._own_statement(call)
            if isinstance(statement, cst.SimpleStatementSuite):
                owner = self._parent(statement)
                if owner is not None:
                    targets.append(owner)
            elif statement is not None:
                targets.append(statement)
        return targets

    # ------------------------------------------------------------ statements
    _SHARED_LINE = "call shares its line with other statements"

    def _own_statement(
        self, call: cst.Call
    ) -> tuple[cst.SimpleStatementLine | cst.SimpleStatementSuite | None, str]:
        """The statement that is only this call, or None and why not."""
        expr = self._parent(call)
        if not isinstance(expr, cst.Expr):
            return None, "call used inside an expression"
        line = self._parent(expr)
        if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            if len(line.body) == 1:
                return line, ""
        return None, self._SHARED_LINE

    def _module_index(self, node: cst.CSTNode) -> int:
        top: cst.CSTNode | None = node
        while top is not None and self._parent(top) is not self.module:
            top = self._parent(top)
        return next(index for index, statement in enumerate(self.module.body) if statement is top)

    def _statement_column(self, statement: cst.CSTNode | None) -> int:
        if statement is None:
            return 0
        if isinstance(statement, cst.SimpleStatementSuite):
            owner = self._parent(statement)
            column = self.positions[owner].column if owner is not None else 0
            return column + len(self.module.default_indent)
        return self.positions[statement].column

    def _delegates(self, call: cst.Call) -> bool:
        """A call inside a hook's own definition: the hook forwards (``def set_x(...):
        self.inner.set_x(ids)``) and must keep raising, so it is not a caller to fix."""
        scope_node = self._enclosing_scope_node(call)
        return isinstance(scope_node, cst.FunctionDef) and scope_node.name.value in self.names

    # ----------------------------------------------------------------- sites
    def analyze(self, call: cst.Call) -> FoundCall | None:
        scopes = self._scope_chain(call)
        resolved = self._resolve_callee(call, scopes)
        if resolved is None:
            return None
        names, shape = resolved
        if self._delegates(call):
            return None
        hooks = tuple(hook for hook in self.hooks.hooks if hook.name in names)
        rejects_none = any(not hook.accepts_none for hook in hooks)
        lenient = [hook.name for hook in hooks if hook.accepts_none]
        # A call that may reach EAGLE3 too keeps None for it: the guard tests the hook name.
        name_expr = self._name_expr(call, scopes) if rejects_none and lenient else None
        hook_name = name_expr
        if hook_name is None and len(hooks) > 1:
            hook_name = self._name_expr(call, scopes)
        # Only hooks the release facts show raising NotImplementedError under PP.
        can_raise_pp = bool(raising_hooks(hooks))

        ids_arg = self._ids_arg(call, shape)
        ids_core = None if ids_arg is None or ids_arg.star else _unwrap_container(ids_arg.value)
        statement, not_own = self._own_statement(call)
        shared_line = statement is None and not_own == self._SHARED_LINE
        movable = statement is not None or shared_line
        name_key = (_key(name_expr), frozenset(lenient)) if name_expr is not None else None
        guarded = ids_core is not None and self._is_guarded(call, _key(ids_core), name_key)
        handles = self._handles_not_implemented(call)

        risks: list[Risk] = []
        notes: list[str] = []
        bind_name = None
        if rejects_none:
            if ids_arg is None:
                risks.append(Risk.LITERAL_NONE)
                notes.append("will raise: no layer ids passed and the hook requires them")
            elif ids_core is not None and _is_none(ids_core):
                risks.append(Risk.LITERAL_NONE)
                notes.append(
                    "will raise ValueError: None passed to a hook that rejects it; "
                    "pass explicit layer ids"
                )
            elif ids_core is not None and not guarded and self.maybe_none(ids_core, scopes):
                risks.append(Risk.MAYBE_NONE)
                if movable and not _is_repeatable(ids_core):
                    # An expression is evaluated once: bound to a new name, then guarded.
                    bind_name = binding_name(ids_core, scopes[0].names if scopes else ())
        if can_raise_pp and not handles:
            risks.append(Risk.PP_UNSUPPORTED)
        if loses_captures_silently(hooks) and not self.pp_pinned_off:
            risks.append(Risk.PP_SILENT)  # not where the module pins pp_size to 1

        position = self.positions[call]
        site = CallSite(
            path=self.path,
            line=position.line,
            column=position.column + 1,
            hook="|".join(sorted(names)),
            shape=shape,
            ids_source=None if ids_arg is None else _code(ids_arg.value),
            risks=tuple(risks) or (Risk.SAFE,),
            guarded=guarded,
            handles_not_implemented=handles,
            actions=(Action.NONE,),
        )
        facts = SiteFacts(site, movable, not_own, tuple(lenient), name_expr is not None)
        actions, notes = _decide(facts, notes)
        site = dataclasses.replace(site, actions=actions, note="; ".join(notes))
        return FoundCall(
            call=call,
            site=site,
            hooks=hooks,
            statement=statement,
            ids_arg=ids_arg,
            ids_core=ids_core,
            statement_column=self._statement_column(statement),
            module_index=self._module_index(call),
            names_in_scope=frozenset(scopes[0].names) if scopes else frozenset(),
            shared_line=shared_line,
            name_expr=name_expr,
            bind_name=bind_name,
            hook_name=hook_name,
            claims=self._claims(statement, hook_name),
        )


def _decide(facts: SiteFacts, notes: list[str]) -> tuple[tuple[Action, ...], list[str]]:
    """The actions for one call site: each registered codemod's that applies to it, in the
    registry's order, or review alone when one of them leaves the site for a person."""
    actions: list[Action] = []
    notes = list(notes)
    for entry in registry.ENTRIES:
        verdict = entry.applies(facts)
        if verdict.review is not None:
            if verdict.review:
                notes.append(verdict.review)
            return (Action.REVIEW,), notes
        if verdict.applies:
            actions.append(Action(entry.action))
    return tuple(actions) or (Action.NONE,), notes


def _found_calls(analyzer: _Analyzer) -> list[FoundCall]:
    found = (analyzer.analyze(call) for call in analyzer.hook_calls)
    ordered = sorted(
        (item for item in found if item is not None),
        key=lambda item: (item.site.line, item.site.column),
    )
    # Calls inside pytest.raises / assertRaises are reported, never rewritten.
    ordered = skip_expected_errors(ordered, analyzer.module, analyzer.parents, analyzer.imports)
    # Calls whose code needs the capture: no skip and no swallowed error.
    ordered = [_unless_required(analyzer, item) for item in ordered]
    # A claim of capture that a rewrite could not keep consistent: for a person.
    return [_unless_inconsistent(item) for item in ordered]


def _unless_inconsistent(item: FoundCall) -> FoundCall:
    """``item`` for review when it would be rewritten (not where capture is required) and a
    statement claiming capture after it cannot be kept consistent (``claims.unresolved``)."""
    claims = item.claims
    if claims is None or claims.unresolved is None or item.required:
        return item
    if is_skipped(item.site) or not set(item.site.actions) & registry.ACTIONS:
        return item
    site = dataclasses.replace(item.site, actions=(Action.REVIEW,), note=claims.unresolved)
    return dataclasses.replace(item, site=site)


def _pp_advice(item: FoundCall) -> str:
    """What to do under PP about a call left as it is: ``auxcap upstream-patch`` only where it
    helps (captures lost silently: the family patch; ``NotImplementedError``: only for hooks
    whose raising setters the patch rewrites, :func:`codemods.catalog.pp_raise.pp_hint`)."""
    raising = [hook.name for hook in raising_hooks(item.hooks)]
    if raising:
        return pp_hint(raising)
    if Risk.PP_SILENT in item.site.risks:
        return "run with --pp-size 1, or apply `auxcap upstream-patch`"
    return "run with --pp-size 1"


def _unless_required(analyzer: _Analyzer, item: FoundCall) -> FoundCall:
    """``item`` marked skipped when it would be rewritten and its capture is required."""
    if is_skipped(item.site) or not set(item.site.actions) & registry.ACTIONS:
        return item
    reason = analyzer._capture_required(item.call, item.ids_core)
    if reason is None:
        return item
    optional = analyzer._optional_evidence(item.call)
    if optional:  # the signs conflict: left loud, for a person to decide
        note = (
            f"conflicting signs: {reason}, but {'; '.join(optional)}; left as is, "
            "decide whether the run may go on without the capture"
        )
        site = dataclasses.replace(item.site, actions=(Action.REVIEW,), note=note)
        return dataclasses.replace(item, site=site)
    kept = [
        entry
        for entry in registry.ENTRIES
        if entry.action in item.site.actions and entry.where_required is not None
    ]
    if kept:  # the codemods that still rewrite a call whose capture is required
        texts = [reason, *(str(entry.where_required) for entry in kept)]
        if item.name_expr is not None and Action.GUARD in item.site.actions:
            # The guard tests the hook name: a hook that takes None is left to it.
            verb = "takes" if len(item.lenient_names) == 1 else "take"
            texts.append(f"{', '.join(item.lenient_names)} {verb} None (default layers): exempt")
        note = "; ".join(texts)
        actions = tuple(Action(entry.action) for entry in kept)
        site = dataclasses.replace(item.site, actions=actions, note=note)
        return dataclasses.replace(item, site=site, required=True)
    note = f"{reason}; left as is (under PP: {_pp_advice(item)})"
    return dataclasses.replace(item, site=mark_skipped(item.site, note))


def find_calls(
    wrapper: MetadataWrapper, path: str = "<string>", hooks: HookSet = DEFAULT_HOOKS
) -> list[FoundCall]:
    """Every hook call in ``wrapper.module``, in source order."""
    return _found_calls(_Analyzer(wrapper, path, hooks))


@dataclass(frozen=True)
class Analysis:
    """Discovery's result for one parsed module, handed to every codemod: the hook calls with
    their facts, and each node's parent (so a codemod can visit only the paths to its calls)."""

    module: cst.Module
    found: tuple[FoundCall, ...]
    parents: Mapping[cst.CSTNode, cst.CSTNode]
    #: Every import statement and every call of the module, from the same walk (what
    #: :func:`codemods.callers.scope.module_skip_reason` looks at).
    imports: tuple[cst.Import | cst.ImportFrom, ...] = ()
    calls: tuple[cst.Call, ...] = ()

    @property
    def sites(self) -> tuple[CallSite, ...]:
        return tuple(item.site for item in self.found)

    def paths_to(self, nodes: Iterable[cst.CSTNode]) -> set[cst.CSTNode]:
        """``nodes``, their ancestors and the module: what a pruned visit must enter."""
        paths: set[cst.CSTNode] = {self.module}
        for node in nodes:
            current: cst.CSTNode | None = node
            while current is not None and current not in paths:
                paths.add(current)
                current = self.parents.get(current)
        return paths


def analyse(module: cst.Module, path: str = "<string>", hooks: HookSet = DEFAULT_HOOKS) -> Analysis:
    """Discover the hook calls of ``module`` once (the module is not copied)."""
    analyzer = _Analyzer(MetadataWrapper(module, unsafe_skip_copy=True), path, hooks)
    return Analysis(
        module,
        tuple(_found_calls(analyzer)),
        analyzer.parents,
        tuple(analyzer.imports),
        tuple(analyzer.calls),
    )


def find_call_sites(
    module: cst.Module, path: str = "<string>", hooks: HookSet = DEFAULT_HOOKS
) -> list[CallSite]:
    """Call-site records for a parsed module (a convenience over :func:`find_calls`)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # read-only use
    return [item.site for item in find_calls(wrapper, path, hooks)]


def mentions_hooks(text: str | bytes, hooks: HookSet = DEFAULT_HOOKS) -> bool:
    """Cheap text test: could this source contain a hook call at all?"""
    if isinstance(text, bytes):
        return any(name.encode() in text for name in hooks.names)
    return any(name in text for name in hooks.names)
