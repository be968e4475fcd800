"""The decoder-layer loops the family's forward shapes recognise: one table, :data:`FORMS`.

A forward captures in the loop that runs its stage's layers; every shape asks this table
which loop that is and which name holds the global layer index ``i`` (capture id ``i``
is taken in iteration ``i``).  Each :class:`LoopForm` is one way of writing that loop:
the loop's head (a LibCST matcher), the name of the layer index, and what else must hold
for the loop to run exactly the stage's layers with that index.  The forms' heads do not
overlap, so a loop has at most one form (:func:`form_of`), and each shape names the forms
it accepts:

* the classic loop shape (``shapes/loop.py``) takes every form and reads its index
  without checking the range (:data:`ANY_FORM`, :func:`layer_index`; an enumerated
  form's index only once the loop offsets it to the global id);
* the layer-entry shapes (``shapes/entry.py``, ``shapes/snapshot.py``, ``shapes/gated.py``)
  need the stage's layers exactly (:data:`STAGE_RANGES`, plus :data:`ENUMERATED_SLICE`
  for the callback forwards; :func:`stage_loop_problem` says why a loop is not one).

Adding a form is one entry in :data:`FORMS` (its head must not match another form's
fixture) and its fixture, ``fixtures/upstream/loop_forms/<name>.py``, which
``tests/upstream/family/test_loop_forms.py`` checks against the table; a shape that
should take the form lists it among the forms it accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.upstream.family.layer_entry.tbo import narrowed_range_problem
from codemods.upstream.family.syntax import assignments, name_value, start_offset


@dataclass(frozen=True)
class LoopSite:
    """A loop where a shape found it: ``body[index]`` is the loop or the top-level
    statement that holds it (the forms narrowed before the loop read ``body``)."""

    body: Sequence[cst.BaseStatement]
    index: int
    loop: cst.For


@dataclass(frozen=True)
class LoopForm:
    """One way of writing the layer loop.

    ``head`` matches the ``for`` node (the forms' heads do not overlap); ``index`` names
    the variable that holds the layer index of a loop ``head`` matches; ``index_problem``
    says why that variable is not the global layer id (``None`` when it is);
    ``range_problem`` says why the loop does not run exactly the stage's layers, from
    ``self.start_layer`` to ``self.end_layer`` (``None`` when it does).  ``example`` is
    the loop's first lines, as a fixture of the form shows them.
    """

    name: str
    head: m.For
    index: Callable[[cst.For], str]
    example: str
    index_problem: Callable[[cst.For], str | None] = lambda loop: None
    range_problem: Callable[[LoopSite], str | None] = lambda site: None

    def problem(self, site: LoopSite) -> str | None:
        """Why ``site.loop`` (of this form) does not run the stage's layers by their global
        index; ``None`` when it does."""
        return self.index_problem(site.loop) or self.range_problem(site)


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _target_name(loop: cst.For) -> str:
    return name_value(loop.target)


def _first_name(loop: cst.For) -> str:
    assert isinstance(loop.target, cst.Tuple)  # the head matched ``for <i>, <layer> in``
    return name_value(loop.target.elements[0].value)


#: ``range(self.start_layer, self.end_layer)``: the stage's layers.
_STAGE_RANGE = m.Call(
    func=m.Name("range"),
    args=[m.Arg(_self_attr("start_layer")), m.Arg(_self_attr("end_layer"))],
)
#: ``range(<a>, <b>)`` over two locals.
_LOCAL_RANGE = m.Call(func=m.Name("range"), args=[m.Arg(m.Name()), m.Arg(m.Name())])
#: ``self.layers[self.start_layer : self.end_layer]``
_STAGE_SLICE = m.Subscript(
    value=_self_attr("layers"),
    slice=[
        m.SubscriptElement(
            m.Slice(lower=_self_attr("start_layer"), upper=_self_attr("end_layer"), step=None)
        )
    ],
)
_PAIR = m.Tuple(elements=[m.Element(m.Name()), m.Element(m.Name())])


def _offset_problem(loop: cst.For) -> str | None:
    """The enumerated index becomes the global layer id in the loop's first statement."""
    index = _first_name(loop)
    statements = list(loop.body.body)
    if not statements or not m.matches(statements[0], start_offset(index)):
        return f"the loop does not start with `{index} = {index} + self.start_layer`"
    return None


def _offset_once_problem(loop: cst.For) -> str | None:
    """As :func:`_offset_problem`, and the loop assigns the index nowhere else."""
    problem = _offset_problem(loop)
    if problem is None and len(assignments(loop, _first_name(loop))) != 1:
        return f"`{_first_name(loop)}` is assigned more than once in the loop"
    return problem


def _narrowed(site: LoopSite) -> str | None:
    return narrowed_range_problem(list(site.body), site.index, site.loop)


def _not_the_slice(site: LoopSite) -> str | None:
    return "the loop does not enumerate `self.layers[self.start_layer : self.end_layer]`"


def _not_the_stage(site: LoopSite) -> str | None:
    return "the loop does not run over `range(<start>, <end>)`"


#: ``for i in range(self.start_layer, self.end_layer):``
STAGE_RANGE = LoopForm(
    "stage-range",
    m.For(target=m.Name(), iter=_STAGE_RANGE),
    _target_name,
    "for i in range(self.start_layer, self.end_layer):",
)
#: Two locals set to the stage's range, narrowed only for two-batch overlap
#: (``layer_entry/tbo.py``; glm4_moe, glm4_moe_lite).
NARROWED_RANGE = LoopForm(
    "narrowed-range",
    m.For(target=m.Name(), iter=_LOCAL_RANGE),
    _target_name,
    "normal_start_layer = self.start_layer\n"
    "normal_end_layer = self.end_layer\n"
    "if forward_batch.can_run_tbo:\n"
    "    normal_end_layer = self.first_k_dense_replace\n"
    "for i in range(normal_start_layer, normal_end_layer):",
    range_problem=_narrowed,
)
#: The stage's slice of the stack, enumerated, offset to the global id first thing
#: (qwen3_vl, qwen3_vl_moe).
ENUMERATED_SLICE = LoopForm(
    "enumerated-slice",
    m.For(
        target=_PAIR,
        iter=m.Call(func=m.Name("enumerate"), args=[m.Arg(_STAGE_SLICE)]),
    ),
    _first_name,
    "for layer_idx, layer in enumerate(\n"
    "    self.layers[self.start_layer : self.end_layer]\n"
    "):\n"
    "    layer_idx = layer_idx + self.start_layer",
    index_problem=_offset_once_problem,
)
#: Anything else enumerated, offset to the global id first thing: the classic shape
#: takes it for the index alone.
ENUMERATED_OFFSET = LoopForm(
    "enumerated-offset",
    m.For(
        target=_PAIR,
        iter=m.Call(func=m.Name("enumerate"))
        & ~m.Call(func=m.Name("enumerate"), args=[m.Arg(_STAGE_SLICE)]),
    ),
    _first_name,
    "for i, layer in enumerate(self.layers):\n    i += self.start_layer",
    index_problem=_offset_problem,
    range_problem=_not_the_slice,
)
#: Any other ``range(...)``: the classic shape takes its variable as the layer index
#: (``range(len(self.layers))``, llama4; ``range(total_num_layers)``, longcat_flash).
OTHER_RANGE = LoopForm(
    "other-range",
    m.For(
        target=m.Name(),
        iter=m.Call(func=m.Name("range")) & ~_STAGE_RANGE & ~_LOCAL_RANGE,
    ),
    _target_name,
    "for i in range(len(self.layers)):",
    range_problem=_not_the_stage,
)

#: Every loop form, in no particular order (their heads do not overlap).
FORMS: tuple[LoopForm, ...] = (
    STAGE_RANGE,
    NARROWED_RANGE,
    ENUMERATED_SLICE,
    ENUMERATED_OFFSET,
    OTHER_RANGE,
)
#: What the classic loop shape takes: any form whose index is the global layer id.
ANY_FORM = FORMS
#: The ranges over the stage's layers that bind one variable.
STAGE_RANGES = (STAGE_RANGE, NARROWED_RANGE)


def form_of(loop: cst.For) -> LoopForm | None:
    """The form whose head ``loop`` matches, if any."""
    found = [form for form in FORMS if m.matches(loop, form.head)]
    assert len(found) <= 1, [form.name for form in found]
    return found[0] if found else None


def layer_index(loop: cst.For, forms: Collection[LoopForm] = ANY_FORM) -> str | None:
    """The global layer index of ``loop`` if it has one of ``forms`` and its index is the
    global layer id (the range is not checked); ``None`` otherwise."""
    form = form_of(loop)
    if form is None or form not in forms or form.index_problem(loop) is not None:
        return None
    return form.index(loop)


def stage_loop_problem(
    site: LoopSite, forms: Collection[LoopForm] = STAGE_RANGES, alternatives: str = ""
) -> str | None:
    """Why ``site.loop`` is not one of ``forms`` running exactly the stage's layers;
    ``None`` when it is.  A loop of another form, or one of the ranges in ``forms``
    that fails its checks, is described as not the stage's range; ``alternatives``
    names what else it is not."""
    form = form_of(site.loop)
    if form is not None and form in forms and form not in STAGE_RANGES:
        return form.problem(site)
    if form is not None and form in forms and form.problem(site) is None:
        return None
    if not m.matches(site.loop, m.For(target=m.Name())):
        return "the capturing loop does not bind one loop variable"
    narrowed = NARROWED_RANGE.problem(site) if form is NARROWED_RANGE else _not_the_stage(site)
    return (
        "the capturing loop is not `for i in range(self.start_layer, "
        f"self.end_layer)`{alternatives} ({narrowed})"
    )
