"""The forward shapes of the capture-hook family, in the order they claim a forward.

Each shape is one module under ``family/shapes/`` exporting one :class:`Shape` named
``SHAPE``: its capture kinds (with their descriptions and release-table cells), the cheap
test that claims a forward, the analysis and the rewrite.  This module is the only one
that imports them; the planner, the rewrite and the reports ask it.

:data:`SHAPES` is asked in order: the first shape that claims a forward analyses it,
recognised or not.  The classic layer-loop shape (``shapes/loop.py``) claims every
forward, so it comes last.

A new shape is one module under ``family/shapes/`` (its ``SHAPE``, with the kinds it
records), one line in :data:`SHAPES` and the fixtures that show it; helpers several shapes
share go outside ``family/shapes/`` (``family/layer_entry/``, ``family/gate.py``), so
shape modules never import each other.
"""

from __future__ import annotations

import libcst as cst

from codemods.upstream.edit.names import COLLECT, SEED
from codemods.upstream.family.forward import CaptureKind, ForwardShape, Shape
from codemods.upstream.family.layer_entry.seed import with_seed
from codemods.upstream.family.shapes import entry, gated, loop, snapshot

SHAPES: tuple[Shape, ...] = (entry.SHAPE, snapshot.SHAPE, gated.SHAPE, loop.SHAPE)

_KINDS: dict[str, tuple[Shape, CaptureKind]] = {
    kind.name: (shape, kind) for shape in SHAPES for kind in shape.kinds
}


def analyse_forward(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """The shape of a forward that reads the capture ids; ``problem`` says why it is not
    recognised.  A forward that packs its captures gets ``seed_after``
    (:func:`~codemods.upstream.family.layer_entry.seed.with_seed`)."""
    shape = next(shape for shape in SHAPES if shape.claims(fn))
    return with_seed(shape.analyse(class_name, fn, line), fn)


def capture_kind(name: str) -> CaptureKind:
    """The capture kind a ``ForwardShape.capture_kinds`` entry names."""
    return _KINDS[name][1]


def shape_of(forward: ForwardShape) -> Shape:
    """The shape that recognised ``forward`` (the owner of its capture kinds)."""
    for name in forward.capture_kinds:
        return _KINDS[name][0]
    raise ValueError(f"{forward.class_name}.forward records no capture kind")


def describe(kind: str) -> str:
    """How tables and commit messages describe a capture kind."""
    return capture_kind(kind).description


def cell(kind: str) -> str:
    """The release-table cell of a capture kind."""
    return capture_kind(kind).cell


def is_layer_entry(capture_kinds: tuple[str, ...]) -> bool:
    """Whether a forward of these capture kinds is of a layer-entry shape."""
    return any(_KINDS[kind][0].layer_entry for kind in capture_kinds if kind in _KINDS)


def adds_stack_setter(capture_kinds: tuple[str, ...]) -> bool:
    """Whether a stack setter the hook lacks may be added for a forward of these kinds."""
    return all(capture_kind(kind).adds_stack_setter for kind in capture_kinds)


def rewrite(fn: cst.FunctionDef, forward: ForwardShape) -> cst.FunctionDef | cst.FlattenSentinel:
    """``fn`` rewritten by the shape of ``forward``."""
    return shape_of(forward).rewrite(fn, forward)


def glue(forward: ForwardShape) -> tuple[str, ...]:
    """Names the rewritten ``forward`` imports from the shipped module (a forward that
    seeds its packer gathers nothing after its layers)."""
    names = shape_of(forward).glue
    if forward.seed_after is None:
        return names
    return tuple(SEED if name == COLLECT else name for name in names)


def setter_ids_attr(forward: ForwardShape) -> str | None:
    """The ``ids_attr`` the rewritten hooks pass for ``forward``'s stack, if not its own."""
    return shape_of(forward).setter_ids_attr


def handoff(proxy_arg: str | None) -> str | None:
    """How reports name a forward's handoff (``ForwardShape.proxy_arg``)."""
    if proxy_arg is None:
        return None
    for shape in SHAPES:
        if proxy_arg in shape.handoffs:
            return shape.handoffs[proxy_arg]
    raise KeyError(f"no shape hands off as {proxy_arg!r}")
