"""The base of the caller codemods: a LibCST transformer that rewrites the call sites an
:class:`~codemods.callers.analyse.Analysis` marks with its action, visiting only the paths to them.

A codemod names its ``ACTION`` (a :class:`~codemods.callers.records.Action`) and its policy choices
(``POLICIES``); :meth:`CallSiteCodemod.targets` picks the sites it applies to, and
:meth:`transform_module` lets it run on its own (LibCST's codemod CLI, ``CodemodTest``):
split shared lines, analyse, apply.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from codemods.callers.analyse import FoundCall
from codemods.callers.records import Action
from codemods.callers.rewrite import host_style
from codemods.catalog.hooks import HookSet


class CallSiteCodemod(cst.CSTTransformer):
    ACTION: Action
    POLICIES: tuple[str, ...]
    #: Label of the policy in messages ("guard policy").
    POLICY_LABEL: str

    def __init__(
        self,
        filename: str,
        policy: str,
        extra_hooks: tuple[str, ...] | list[str] | None = None,
        line_length: int | None = None,
    ) -> None:
        super().__init__()
        self.filename = filename
        #: No added line goes past it: the host project's configured line length (found from
        #: ``filename`` when not given; see :func:`codemods.callers.rewrite.host_style.file_line_length`).
        self.line_length = (
            line_length if line_length is not None else host_style.file_line_length(filename)
        )
        if policy not in self.POLICIES:
            raise ValueError(
                f"unknown {self.POLICY_LABEL} {policy!r}; use one of {self.POLICIES}"
            )
        self.policy = policy
        self.hooks = HookSet.with_extra(tuple(extra_hooks or ()))
        self._paths: set[cst.CSTNode] | None = None

    @classmethod
    def applies(cls, found: FoundCall) -> bool:
        """Whether this codemod rewrites ``found`` (a statement of its own, marked for it)."""
        return cls.ACTION in found.site.actions and found.statement is not None

    @classmethod
    def targets(cls, found: Iterable[FoundCall]) -> tuple[FoundCall, ...]:
        return tuple(item for item in found if cls.applies(item))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._paths is not None and node not in self._paths:
            return False  # no call of ours below: keep the subtree as it is
        return super().on_visit(node)

    def transform_module(self, tree: cst.Module) -> cst.Module:
        """The rewritten module, on its own (``tree`` itself is never changed)."""
        from codemods.callers.rewrite.split import analyse_split

        analysis = analyse_split(tree, self.hooks, self.filename)
        return self.apply_analysis(analysis)

    def apply_analysis(self, analysis) -> cst.Module:  # pragma: no cover - overridden
        raise NotImplementedError
