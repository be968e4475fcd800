"""The types every forward shape of the capture-hook family shares.

A decoder-stack forward that reads ``self.layers_to_capture`` collects aux hidden states
in one of a few shapes (one module each under ``family/shapes/``, listed in
:mod:`~codemods.upstream.family.registry`).  Each :class:`Shape` says which forwards it
claims, analyses them into a :class:`ForwardShape` (read-only; a forward it does not
recognise carries the reason) and rewrites them; each way of capturing is a
:class:`CaptureKind`, recorded in ``ForwardShape.capture_kinds`` and described in reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import libcst as cst

from codemods.upstream.family.syntax import IDS_ATTR


class FamilyRewriteError(ValueError):
    """A shape that analysis accepted could not be rewritten (a bug, reported per file)."""


def handoff_parts(
    fn: cst.FunctionDef, shape: ForwardShape
) -> tuple[list[cst.BaseStatement], str, str]:
    """The statements of a forward to rewrite, with its capture list and PP proxy
    parameter; ``FamilyRewriteError`` when it has no block body or no PP handoff."""
    if not isinstance(fn.body, cst.IndentedBlock):
        raise FamilyRewriteError(f"{shape.class_name}.forward has no block body")
    if shape.aux_name is None or shape.proxy_param is None:
        raise FamilyRewriteError(f"{shape.class_name}.forward has no PP handoff")
    return list(fn.body.body), shape.aux_name, shape.proxy_param


def in_else_block(handoff: cst.If, shape: ForwardShape, insert: Callable[[list], None]) -> cst.If:
    """``handoff`` (the non-last-rank ``if``) with ``insert`` applied to the statements of
    its ``else`` block; ``FamilyRewriteError`` when it has none."""
    if not isinstance(handoff.orelse, cst.Else):
        raise FamilyRewriteError(f"{shape.class_name}.forward handoff has no else block")
    block = list(handoff.orelse.body.body)
    insert(block)
    orelse = handoff.orelse.with_changes(body=handoff.orelse.body.with_changes(body=block))
    return handoff.with_changes(orelse=orelse)


@dataclass(frozen=True)
class ForwardShape:
    """The forward of a class that reads ``self.layers_to_capture``."""

    class_name: str
    line: int
    aux_name: str | None = None
    capture_kinds: tuple[str, ...] = ()
    #: How it hands off: ``PPProxyTensors`` of a dict literal (``"dict"``) or of a name
    #: (``"name"``), or ``residual_batch.to_pp`` (``"to_pp"``).
    proxy_arg: str | None = None
    proxy_param: str | None = None
    #: The last stage captures the stage output (id == num_layers) after its layers.
    final_capture: bool = False
    #: Index of the top-level statement the gathering must precede (a last-rank capture
    #: placed before the handoff); ``None``: right after the handoff.
    collect_before: int | None = None
    #: The attribute the forward reads the capture ids from.
    ids_attr: str = IDS_ATTR
    #: Source of the condition, besides ``i in ids``, under which the forward captures
    #: (e.g. ``capture_aux and hidden_states.shape[0] != 0``); the same on every stage.
    #: The handoff and the gathering then run only when it holds.
    gate: str | None = None
    #: Top-level statements ``name = ... and <pp>.is_last_rank and ...`` that define a
    #: gate: the last-rank condition is dropped so that every stage captures.
    gate_assignments: tuple[int, ...] = ()
    #: The gathering goes into the handoff's ``else:`` block, before its statement at
    #: this index (the first that reads the captures); ``None``: at the top level.
    collect_in_else: int | None = None
    #: Comments right above a gate assignment that tie capture to the last stage: the
    #: rewrite makes them stale, so they are named for review.
    stale_comments: tuple[str, ...] = ()
    #: Index of the top-level statement that makes the forward's ``AuxHiddenStatePacker``:
    #: the last stage seeds it right after with the earlier stages' captures
    #: (:mod:`~codemods.upstream.family.layer_entry.seed`) instead of gathering after its layers;
    #: ``None``: the forward collects into a list.
    seed_after: int | None = None
    problem: str | None = None

    @property
    def recognised(self) -> bool:
        return self.problem is None


@dataclass(frozen=True)
class CaptureKind:
    """One way a forward captures, as ``ForwardShape.capture_kinds`` records it."""

    #: The entry of ``ForwardShape.capture_kinds`` (and of the JSON survey).
    name: str
    #: How tables and commit messages describe it.
    description: str
    #: The short text of the per-release table in ``docs/models.md`` (``output/release_table.py``).
    cell: str
    #: A stack setter the hook calls but the stack lacks may be added to a stack whose
    #: forward captures only in kinds that allow it (the forward reads the ids the setter
    #: stores directly).
    adds_stack_setter: bool = False


@dataclass(frozen=True)
class Shape:
    """One forward shape: how it is recognised, analysed and rewritten."""

    #: A short name (the module's).
    name: str
    description: str
    #: The capture kinds its analysis records, each owned by this shape alone.
    kinds: tuple[CaptureKind, ...]
    #: Cheap test: whether this shape analyses ``fn`` (the registry asks the shapes in
    #: order; the first that claims a forward analyses it, recognised or not).
    claims: Callable[[cst.FunctionDef], bool]
    #: ``(class name, forward, line) -> ForwardShape``; ``problem`` says why a claimed
    #: forward is not recognised.
    analyse: Callable[[str, cst.FunctionDef, int], ForwardShape]
    #: The rewritten forward (with any method the stack needs besides it).
    rewrite: Callable[[cst.FunctionDef, ForwardShape], cst.FunctionDef | cst.FlattenSentinel]
    #: Names the rewritten forward imports from the shipped module.
    glue: tuple[str, ...]
    #: Captures at layer entry and hands off with ``residual_batch.to_pp`` (the 0.5.21+
    #: shapes a split-stack hook may be planned with).
    layer_entry: bool = False
    #: The stack attribute the rewritten hooks pass to ``set_pp_aux_capture`` as
    #: ``ids_attr`` (the stack's own ids when ``None``).
    setter_ids_attr: str | None = None
    #: How reports name the handoff, per ``ForwardShape.proxy_arg`` the analysis sets.
    handoffs: Mapping[str, str] = field(default_factory=dict)
