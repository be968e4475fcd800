"""The declaration every layer-entry shape shares (``Shape.layer_entry``): the forwards of
:mod:`~codemods.upstream.family.shapes.entry`, :mod:`~codemods.upstream.family.shapes.snapshot`
and :mod:`~codemods.upstream.family.shapes.gated` capture at layer entry and hand on with
``residual_batch.to_pp``; rewritten, they import the handoff and gathering helpers."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from codemods.upstream.edit.names import COLLECT, HANDOFF
from codemods.upstream.family.forward import CaptureKind, ForwardShape, Shape
from codemods.upstream.family.layer_entry.handoff import PROXY_ARG, PROXY_TEXT
from codemods.upstream.family.layer_entry.rewrite import rewrite_forward


def layer_entry_shape(
    name: str,
    captures: str,
    kinds: tuple[CaptureKind, ...],
    claims: Callable[[cst.FunctionDef], bool],
    analyse: Callable[[str, cst.FunctionDef, int], ForwardShape],
    rewrite: Callable[[cst.FunctionDef, ForwardShape], cst.FunctionDef | cst.FlattenSentinel]
    | None = None,
    setter_ids_attr: str | None = None,
) -> Shape:
    """A layer-entry shape whose forwards capture as ``captures`` says, rewritten by
    ``rewrite`` (the callback forwards' rewrite by default)."""
    return Shape(
        name=name,
        description=f"{captures}, handed on with `residual_batch.to_pp`",
        kinds=kinds,
        claims=claims,
        analyse=analyse,
        rewrite=rewrite or rewrite_forward,
        glue=(COLLECT, HANDOFF),
        layer_entry=True,
        setter_ids_attr=setter_ids_attr,
        handoffs={PROXY_ARG: PROXY_TEXT},
    )
