"""The base of the caller codemods: a LibCST transformer that rewrites the call sites an
:class:`~codemods.callers.analyse.Analysis` marks with its action, visiting only the paths to them.

A codemod names its ``ACTION`` (a :class:`~codemods.callers.records.Action`) and its policy choices
(``POLICIES``); :meth:`CallSiteCodemod.targets` picks the sites it applies to, and
:meth:`transform_module` lets it run on its own (LibCST's codemod CLI, ``CodemodTest``):
split shared lines, analyse, apply.

``migrate`` runs the registered codemods one after the other through :meth:`rewrite_calls`
(:mod:`codemods.callers.rewrite.apply`).  So that a later codemod works on an earlier one's
output without a second discovery, every codemod records what replaced each node it visited
(``rebuilt``) and, for the calls a later codemod rewrites (``follow``), the statement that
holds only the call afterwards (``moved``; a codemod that wraps or rebuilds a followed call's
statement sets it in its ``leave_*`` method, an untouched one is recorded here).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import libcst as cst

from codemods.callers.analyse import FoundCall
from codemods.callers.records import Action, CallSite
from codemods.callers.rewrite import host_style
from codemods.callers.rewrite.metadata import CodemodMetadata
from codemods.catalog.hooks import HookSet


class CallSiteCodemod(cst.CSTTransformer):
    #: The action of its registry entry (an :class:`Action`, or that action's string).
    ACTION: Action | str
    #: Its registry record; when set, the policy option there gives ``POLICIES``,
    #: ``POLICY_LABEL``, the default policy and the policy's keyword (``guard_policy=``).
    METADATA: CodemodMetadata | None = None
    POLICIES: tuple[str, ...]
    #: Label of the policy in messages ("guard policy").
    POLICY_LABEL: str

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        metadata = cls.__dict__.get("METADATA")
        if metadata is not None:
            cls.POLICIES = metadata.policy.names
            cls.POLICY_LABEL = metadata.policy.label

    def __init__(
        self,
        filename: str,
        policy: str | None = None,
        extra_hooks: tuple[str, ...] | list[str] | None = None,
        line_length: int | None = None,
        **named_policy: str,
    ) -> None:
        """``policy`` may also be given by its option's name (``guard_policy="raise"``);
        without either, the option's default."""
        super().__init__()
        policy = self._policy_argument(policy, named_policy)
        self.filename = filename
        #: No added line goes past it: the host project's configured line length (found from
        #: ``filename`` when not given; see :func:`codemods.callers.rewrite.host_style.file_line_length`).
        self.line_length = (
            line_length if line_length is not None else host_style.file_line_length(filename)
        )
        if policy not in self.POLICIES:
            raise ValueError(f"unknown {self.POLICY_LABEL} {policy!r}; use one of {self.POLICIES}")
        self.policy = policy
        self.hooks = HookSet.with_extra(tuple(extra_hooks or ()))
        self._paths: set[cst.CSTNode] | None = None
        #: The statements of this codemod's calls (its targets) in the visited module.
        self._statements: dict[cst.CSTNode, FoundCall] = {}
        #: Statements of the calls a later codemod rewrites.
        self._followed: set[cst.CSTNode] = set()
        #: Original statement -> the statement holding only the call afterwards.
        self.moved: dict[cst.CSTNode, cst.SimpleStatementLine | cst.SimpleStatementSuite] = {}
        #: Original node -> what replaced it, for every node the visit entered.
        self.rebuilt: dict[cst.CSTNode, object] = {}

    @classmethod
    def _policy_argument(cls, policy: str | None, named: dict[str, str]) -> str:
        option = cls.METADATA.policy if cls.METADATA is not None else None
        keyword = option.dest if option is not None else None
        unknown = sorted(name for name in named if name != keyword)
        if unknown:
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {unknown[0]!r}")
        if keyword in named:
            if policy is not None:
                raise TypeError(f"{cls.__name__}() got the policy twice")
            return named[keyword]
        if policy is not None:
            return policy
        if option is None:
            raise TypeError(f"{cls.__name__}() needs a policy")
        return option.default

    @classmethod
    def applies(cls, found: FoundCall) -> bool:
        """Whether this codemod rewrites ``found`` (a statement of its own, marked for it)."""
        return cls.ACTION in found.site.actions and found.statement is not None

    @classmethod
    def targets(cls, found: Iterable[FoundCall]) -> tuple[FoundCall, ...]:
        return tuple(item for item in found if cls.applies(item))

    @classmethod
    def path_nodes(cls, found: Iterable[FoundCall]) -> list[cst.CSTNode]:
        """The nodes a visit must reach to rewrite ``found``: the calls (and so their
        statements)."""
        return [item.call for item in found]

    @classmethod
    def carried_site(cls, site: CallSite) -> CallSite:
        """``site`` (one this codemod rewrote) as a later codemod sees it: its action done."""
        actions = tuple(action for action in site.actions if action != cls.ACTION)
        return replace(site, actions=actions or (Action.NONE,))

    def rewrite_calls(
        self,
        module: cst.Module,
        found: tuple[FoundCall, ...],
        paths: set[cst.CSTNode],
        follow: tuple[FoundCall, ...] = (),
    ) -> cst.Module:
        """``module`` with ``found`` (its own nodes, this codemod's targets) rewritten,
        visiting only ``paths``; records where the calls of ``follow`` end up."""
        self._statements = {item.statement: item for item in found if item.statement is not None}
        self._followed = {item.statement for item in follow if item.statement is not None}
        self._paths = paths
        self.prepare(module, found)
        return module.visit(self)

    def prepare(self, module: cst.Module, found: tuple[FoundCall, ...]) -> None:
        """Set up what one visit of ``module`` needs besides the statements of ``found``
        (nothing by default)."""

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._paths is not None and node not in self._paths:
            return False  # no call of ours below: keep the subtree as it is
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        self.rebuilt[original_node] = result
        if original_node in self._followed and original_node not in self.moved:
            if isinstance(result, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                self.moved[original_node] = result
        return result

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """The rewritten module, on its own (``tree`` itself is never changed)."""
        from codemods.callers.rewrite.split import analyse_split

        analysis = analyse_split(tree, self.hooks, self.filename)
        return self.apply_analysis(analysis)

    def apply_analysis(self, analysis) -> cst.Module:
        """Rewrite this codemod's targets in ``analysis.module`` (on its own: nothing
        follows)."""
        mine = self.targets(analysis.found)
        return self.rewrite_calls(analysis.module, mine, analysis.paths_to(self.path_nodes(mine)))
