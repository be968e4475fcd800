"""Decoder-stack forwards that capture through a callback at layer entry (SGLang 0.5.22+).

From SGLang 0.5.22 on, most decoder stacks no longer append captures themselves: the
stack creates an ``AuxHiddenStateList`` and hands its ``capture`` method to the layers it
should capture at, and the layer calls it with its input at entry.  The handoff to the
next stage goes through the residual-stream helpers::

        aux_hidden_states = AuxHiddenStateList()
        for i in range(self.start_layer, self.end_layer):
            hidden_states = self.layers[i](
                positions,
                hidden_states,
                forward_batch,
                capture_output=aux_hidden_states.capture
                if i in self.layers_to_capture
                else None,
            )

        if not self.pp_group.is_last_rank:
            return residual_batch.to_pp(hidden_states, forward_batch)
        hidden_states = residual_batch.final_norm(
            hidden_states, forward_batch, self.norm
        )

        if len(aux_hidden_states) == 0:
            return hidden_states

        return hidden_states, aux_hidden_states

The capture hooks still return early off the last rank, so only the last stage captures.
This module recognises that forward (:func:`analyse_forward`, a
:class:`~codemods.upstream.family.forward.ForwardShape` of kind :data:`ENTRY_KIND`, or one
with the reason it is not recognised) and rewrites it
(:func:`~codemods.upstream.family.layer_entry.rewrite.rewrite_forward`, whose docstring
shows the result).

Non-last stages add their captures to the ``PPProxyTensors`` that ``to_pp`` builds (the
same ``aux_hidden_states`` entry and relay helpers as every other model of the family);
the last stage
rebuilds the list a single-stage run returns: same count, order, values and container
(an ``AuxHiddenStateList``).  A missing aux entry or a capture count that does not match
the stage's layers raises on the stage that sees it, naming the layers.  The hooks are
rewritten as for the rest of the family (``family.rewrite.rewrite_setter``).

Two variants are covered as well: a last stage that also captures its own output (id
``num_layers``: ``final_norm(..., capture=aux.capture if self.end_layer in
self.layers_to_capture else None)``), gathered after that capture and kept last
(``final=True``); and the gathered collector (kind :data:`GATHERED_KIND`), whose stack
hands the list itself to the layers a setter flagged (``captured_last_layer_outputs=aux
if getattr(layer, "_is_layer_to_capture", False) else None``), the loop possibly inside a
branch; the layer captures its input at entry all the same.  The loop may also run over
a range narrowed for two-batch overlap (``layer_entry.tbo``), the callback may be a
function of the loop that prepares the value and captures it once (``layer_entry.closure``,
glm5_next), and the non-last-rank branch may return early under a condition of its own:
every return of it hands the captures on (``layer_entry.handoff``).

The gathering goes right before the first statement after the handoff that reads the
captures, after the final norm, so that ``hidden_states`` is a plain ``[tokens, hidden]``
tensor there (before the norm it may be a handle the residual stream still owes a sum).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import COLLECT, HANDOFF
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import CaptureKind, ForwardShape
from codemods.upstream.family.layer_entry.closure import capture_closure
from codemods.upstream.family.layer_entry.handoff import (
    HANDOFF_FUNC,
    PROXY_ARG,
    handoff_index,
    handoff_returns_problem,
)
from codemods.upstream.family.layer_entry.loops import callback_problem, callback_uses
from codemods.upstream.family.layer_entry.packer import (
    ANY_COLLECTOR_CALL,
    SIZE_READ,
    collector_creation,
    is_collector_forward,
    last_rank_output_capture,
)
from codemods.upstream.family.layer_entry.shape import layer_entry_shape
from codemods.upstream.family.loops.forms import (
    ENUMERATED_SLICE,
    STAGE_RANGES,
    LoopSite,
    form_of,
    stage_loop_problem,
)
from codemods.upstream.family.syntax import (
    CAPTURE_KWARG,
    IDS_ATTR,
    LAYER_FLAG,
    SELF_IDS,
    name_value,
    only_assign,
)

#: The layers get a callback at entry.
CALLBACK = CaptureKind(
    "entry-callback",
    "callback at layer entry (`capture_output=aux_hidden_states.capture`)",
    "layer-entry callback",
    adds_stack_setter=True,
)
#: The same forwards with the gathered collector: flagged layers get the list itself.
GATHERED = CaptureKind(
    "entry-gathered",
    "list (or `AuxHiddenStatePacker`) handed to flagged layers at entry "
    "(`captured_last_layer_outputs=`, layer flag `_is_layer_to_capture` or a capture-id "
    "test)",
    "gathered collector",
)
#: ``ForwardShape.capture_kinds`` entries of the forwards this module recognises.
ENTRY_KIND = CALLBACK.name
GATHERED_KIND = GATHERED.name
#: The capture list the forward creates, and the keyword the layers take the callback by.
LIST_CLASS = "AuxHiddenStateList"
CAPTURE_KEYWORD = "capture_output"
#: The hidden states the layer loop assigns and the last stage returns.
HIDDEN = "hidden_states"


def is_entry_forward(fn: cst.FunctionDef) -> bool:
    """Cheap test: the forward creates an ``AuxHiddenStateList``, or an
    ``AuxHiddenStatePacker`` sized by the capture ids and hands off with ``to_pp`` (the
    0.5.21+ shapes; 0.5.20 stacks append into a packer and build ``PPProxyTensors``)."""
    if not is_collector_forward(fn):
        return False
    if findall(fn, m.Call(func=m.Name(LIST_CLASS), args=[])):
        return True
    return isinstance(fn.body, cst.IndentedBlock) and handoff_index(list(fn.body.body)) is not None


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return bool(findall(node, m.Name(name)))


def analyse_forward(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """The forward's shape, or one whose ``problem`` says what was looked for.  The steps:
    the collector (:func:`_collector`), the layer loop and its capture point
    (:func:`_layers`), the handoff (:func:`_handoff`), the stage-output capture and the
    other reads of the list and the ids (:func:`_other_reads`), where the last stage
    gathers (:func:`_gathering`)."""

    def reject(problem: str) -> ForwardShape:
        return ForwardShape(class_name, line, capture_kinds=(ENTRY_KIND,), problem=problem)

    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    proxy_param = next(
        (p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"), None
    )
    if proxy_param is None:
        return reject("forward takes no pp_proxy_tensors (model does not run under PP)")
    body = list(fn.body.body)
    collector = _collector(fn, body)
    if isinstance(collector, str):
        return reject(collector)
    list_index, aux_name = collector
    layers = _layers(fn, body, list_index, aux_name)
    if isinstance(layers, str):
        return reject(layers)
    handoff = _handoff(body, list_index, aux_name, layers)
    if isinstance(handoff, str):
        return reject(handoff)
    reads = _other_reads(fn, body, aux_name, layers, handoff)
    if isinstance(reads, str):
        return reject(reads)
    gathering = _gathering(aux_name, handoff, reads)
    if isinstance(gathering, str):
        return reject(gathering)
    collect_before, collect_in_else = gathering
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=(layers.kind,),
        proxy_arg=PROXY_ARG,
        proxy_param=proxy_param,
        collect_before=collect_before,
        ids_attr=reads.ids_attr,
        collect_in_else=collect_in_else,
        final_capture=bool(reads.finals_top or reads.finals_else or handoff.early_finals),
    )


def _collector(fn: cst.FunctionDef, body: list[cst.BaseStatement]) -> tuple[int, str] | str:
    """``(index, name)`` of the capture list: ``aux = AuxHiddenStateList()`` (or a packer
    sized by the ids) once, at the top level; or why there is none."""
    creations = [
        (index, found)
        for index, found in enumerate(map(collector_creation, body))
        if found is not None
    ]
    if len(creations) != 1 or len(findall(fn, ANY_COLLECTOR_CALL)) != 1:
        return (
            f"`{LIST_CLASS}()` (or `AuxHiddenStatePacker(len(self.{IDS_ATTR}))`) is not "
            "created once, at the top of the forward"
        )
    list_index, (aux_name, _) = creations[0]
    return list_index, aux_name


@dataclass(frozen=True)
class _Layers:
    """The layer loop: the capture kind, the top-level statement that is or holds the
    loop (and its index), the loop, how many times it fills the list and reads the ids."""

    kind: str
    index: int
    statement: cst.BaseStatement
    loop: cst.For
    loop_uses: int
    id_uses: int


def _loop(
    fn: cst.FunctionDef, body: list[cst.BaseStatement], list_index: int, aux_name: str
) -> tuple[str, int, cst.BaseStatement, cst.For] | str:
    """``(capture kind, index, top-level statement, loop)``: the loop after the list is
    made that hands ``aux.capture`` to its layers, or else the one that hands them the
    list itself (the gathered collector, possibly inside a branch); or why there is none."""
    capture_attr = m.Attribute(value=m.Name(aux_name), attr=m.Name("capture"))
    handed = m.Name(aux_name) | m.IfExp(body=m.Name(aux_name))
    list_arg = m.Arg(keyword=m.Name(CAPTURE_KWARG), value=handed)
    loops = [
        (index, statement)
        for index, statement in enumerate(body)
        if index > list_index
        and isinstance(statement, cst.For)
        and findall(statement, capture_attr)
    ]
    if loops:
        kind = ENTRY_KIND
        loop_index, loop = loops[0]
        loop_statement: cst.BaseStatement = loop
    else:
        # The gathered collector: flagged layers get the list itself and capture into it
        # at entry (``prepare(capture_gathered=...)``); the loop may sit in a branch.
        holders = [
            (index, statement)
            for index, statement in enumerate(body)
            if index > list_index and findall(statement, list_arg)
        ]
        if not holders:
            return f"`{aux_name}.capture` is not handed to a layer in a top-level loop"
        inner = [node for node in findall(holders[0][1], m.For()) if findall(node, list_arg)]
        flagged = m.Arg(
            keyword=m.Name(CAPTURE_KWARG),
            value=m.IfExp(body=m.Name(aux_name), test=_FLAG_TEST | _ID_TEST, orelse=m.Name("None")),
        )
        if (
            len(holders) != 1
            or len(inner) != 1
            or len(findall(fn, list_arg)) != 1
            or len(findall(inner[0], flagged)) != 1
        ):
            return (
                f"the layers get the capture list itself (`{CAPTURE_KWARG}={aux_name}`) "
                f"other than once, under the layer flag `{LAYER_FLAG}` or a capture-id "
                "test, in one layer loop"
            )
        kind = GATHERED_KIND
        loop_index, loop_statement = holders[0]
        loop = inner[0]
    return kind, loop_index, loop_statement, loop


def _layers(
    fn: cst.FunctionDef, body: list[cst.BaseStatement], list_index: int, aux_name: str
) -> _Layers | str:
    """The layer loop (:func:`_loop`), of a form of the loop-form table the capture kind
    takes, with its capture point (:func:`_capture_point`); or why there is none."""
    found = _loop(fn, body, list_index, aux_name)
    if isinstance(found, str):
        return found
    kind, loop_index, loop_statement, loop = found
    # The layer loop: a form of the loop-form table (``family/loops/forms.py``); the
    # callback forwards may enumerate the stage's slice of the stack (``layer_entry.loops``).
    forms = (*STAGE_RANGES, ENUMERATED_SLICE) if kind == ENTRY_KIND else STAGE_RANGES
    also = " nor a range narrowed for two-batch overlap"
    site = LoopSite(body, loop_index, loop)
    form = form_of(loop)
    enumerated = form is ENUMERATED_SLICE
    problem = stage_loop_problem(site, forms, also)
    if problem is None and enumerated:
        problem = callback_problem(loop, aux_name)
    if problem is not None:
        return problem
    assert form is not None  # stage_loop_problem accepts a form of the table only
    loop_var = form.index(loop)
    uses = _capture_point(kind, loop, loop_var, aux_name, enumerated)
    if isinstance(uses, str):
        return uses
    return _Layers(kind, loop_index, loop_statement, loop, *uses)


def _capture_point(
    kind: str, loop: cst.For, loop_var: str, aux_name: str, enumerated: bool
) -> tuple[int, int] | str:
    """``(fills of the list, reads of the ids)`` in the layer loop: the callback
    ``capture_output=aux.capture if i in self.<ids> else None`` (or a capture closure of
    the loop), or the list handed to flagged layers; and the layer call assigns
    ``hidden_states``.  Or what is not so."""
    capture_attr = m.Attribute(value=m.Name(aux_name), attr=m.Name("capture"))
    # The callback may be a function of the loop that prepares the value and captures
    # it (``layer_entry.closure``).
    closure, closure_problem = (
        capture_closure(loop, aux_name) if kind == ENTRY_KIND else (None, None)
    )
    if closure_problem is not None:
        return closure_problem
    callback = m.Name(closure) if closure is not None else capture_attr
    keyword = m.Arg(
        keyword=m.Name(CAPTURE_KEYWORD),
        value=m.IfExp(
            body=callback,
            test=m.Comparison(
                left=m.Name(loop_var),
                comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
            ),
            orelse=m.Name("None"),
        ),
    )
    if (
        kind == ENTRY_KIND
        and not enumerated
        and (len(findall(loop, keyword)) != 1 or len(findall(loop, capture_attr)) != 1)
    ):
        return (
            f"no `{CAPTURE_KEYWORD}={closure or aux_name + '.capture'} if {loop_var} in "
            f"self.layers_to_capture else None` in the layer call"
        )
    #: Captures of the layer loop (none for the gathered collector), and its id reads
    #: (the gathered collector may test the ids instead of the layer flag).
    loop_uses = 1 if kind == ENTRY_KIND else 0
    if enumerated:
        loop_uses = callback_uses(loop, aux_name) or 1
    id_uses = loop_uses
    if kind == GATHERED_KIND and findall(loop, _ID_TEST):
        by_id = m.IfExp(
            body=m.Name(aux_name),
            test=m.Comparison(left=m.Name(loop_var), comparisons=[m.ComparisonTarget()]),
        )
        if len(findall(loop, _ID_TEST)) != 1 or len(findall(loop, by_id)) != 1:
            return (
                f"the list is handed to the layers under a capture-id test other than "
                f"`{loop_var} in self.layers_to_capture`"
            )
        id_uses = 1
    # ``hidden_states = layer(...)``, or a tuple holding it (deepseek_v2 also gets the
    # layer's top-k indices back).
    assigned = m.Name(HIDDEN) | m.Tuple(
        elements=[m.ZeroOrMore(), m.Element(m.Name(HIDDEN)), m.ZeroOrMore()]
    )
    if not findall(loop, m.Assign(targets=[m.AssignTarget(assigned)], value=m.Call())):
        return f"the layer loop does not assign `{HIDDEN}`"
    return loop_uses, id_uses


@dataclass(frozen=True)
class _Handoff:
    """The handoff: its index, the last stage's output captures before it, its ``else:``
    block and the statements after it."""

    index: int
    early_finals: list[cst.BaseStatement]
    else_block: list[cst.CSTNode]
    after: list[cst.BaseStatement]


def _handoff(
    body: list[cst.BaseStatement], list_index: int, aux_name: str, layers: _Layers
) -> _Handoff | str:
    """The ``to_pp`` handoff after the loop, the list untouched in between and in the
    non-last-rank branch; or why not."""
    loop_index, loop_statement = layers.index, layers.statement
    # The handoff, after the loop.
    handoff = handoff_index(body)
    if handoff is None:
        return f"no `return residual_batch.{HANDOFF_FUNC}(...)` under `if not ...is_last_rank`"
    if handoff < loop_index:
        return "the PP handoff comes before the layer loop"
    # The last stage may capture its output before the handoff (mimo_v2).
    early_finals = [
        statement
        for statement in body[loop_index + 1 : handoff]
        if last_rank_output_capture(statement, aux_name)
    ]
    for statement in body[list_index + 1 : handoff]:
        if (
            statement is not loop_statement
            and not any(statement is final for final in early_finals)
            and _mentions(statement, aux_name)
        ):
            return f"`{aux_name}` is used between the layer loop and the PP handoff"
    handoff_if = body[handoff]
    assert isinstance(handoff_if, cst.If)  # handoff_index(body)
    if _mentions(handoff_if.body, aux_name) or _mentions(handoff_if.test, aux_name):
        return f"the non-last-rank branch already uses `{aux_name}`"
    returns_problem = handoff_returns_problem(handoff_if)
    if returns_problem is not None:
        return returns_problem
    if any(_mentions(p, HANDOFF) or _mentions(p, COLLECT) for p in body):
        return "the forward already calls the PP aux glue"
    orelse = handoff_if.orelse
    if isinstance(orelse, cst.If):
        return "the PP handoff has an `elif`"
    else_block = list(orelse.body.body) if isinstance(orelse, cst.Else) else []
    after = body[handoff + 1 :]
    return _Handoff(handoff, early_finals, else_block, after)


@dataclass(frozen=True)
class _Reads:
    """The stage-output captures after the handoff (indexes into the statements after
    it and into its ``else:`` block) and the ids attribute."""

    finals_top: list[int]
    finals_else: list[int]
    ids_attr: str


def _other_reads(
    fn: cst.FunctionDef,
    body: list[cst.BaseStatement],
    aux_name: str,
    layers: _Layers,
    found: _Handoff,
) -> _Reads | str:
    """The last stage's output captures, and no other fill of the list or read of the
    ids than the layers' and theirs; or what else there is."""
    handoff, early_finals = found.index, found.early_finals
    else_block, after = found.else_block, found.after
    loop_uses, id_uses = layers.loop_uses, layers.id_uses
    # The last stage may capture its own output (id == num_layers) after its layers,
    # in statements that test ``self.end_layer in self.<ids>``.
    end_test = _end_test(body, handoff)
    finals_top = [k for k, s in enumerate(after) if _final_capture(s, aux_name, end_test)]
    finals_else = [k for k, s in enumerate(else_block) if _final_capture(s, aux_name, end_test)]
    finals = [after[k] for k in finals_top] + [else_block[k] for k in finals_else]
    if sum(map(bool, (finals_top, finals_else, early_finals))) > 1:
        return "the stage output is captured in more than one place"
    aux_attrs = findall(fn, m.Attribute(value=m.Name(aux_name), attr=m.Name()))
    # The packer's ``finalize()`` after the handoff reads the captures, like ``len()``.
    finalized = [
        a
        for s in after
        for a in findall(s, m.Attribute(value=m.Name(aux_name)))
        if a.attr.value == "finalize"
    ]
    final_attrs = [
        a for s in (*finals, *early_finals) for a in findall(s, m.Attribute(value=m.Name(aux_name)))
    ]
    if len(aux_attrs) != loop_uses + len(final_attrs) + len(finalized) or any(
        a.attr.value not in ("capture", "append") for a in final_attrs
    ):
        return f"`{aux_name}` is filled other than by the layers and the stage-output capture"
    ids_reads = findall(fn, SELF_IDS)
    ids_attrs = sorted({node.attr.value for node in ids_reads})
    end_tests = sum(len(findall(s, end_test)) for s in finals) + len(early_finals)
    # ``not self.<ids>`` / ``len(self.<ids>)`` read the same on every stage (the packer's
    # size is one of them).
    size_reads = len(findall(fn, SIZE_READ))
    if len(ids_attrs) > 1 or len(ids_reads) != id_uses + end_tests + size_reads:
        return (
            "reads capture ids outside the layer call and the stage-output capture "
            f"(`self.{ids_attrs[0] if ids_attrs else IDS_ATTR}` {len(ids_reads)} times)"
        )
    return _Reads(finals_top, finals_else, ids_attrs[0] if ids_attrs else IDS_ATTR)


def _gathering(
    aux_name: str, found: _Handoff, reads: _Reads
) -> tuple[int | None, int | None] | str:
    """``(top-level index, index in the handoff's else block)``, one of them ``None``:
    where the last stage gathers, before the first statement that reads the captures
    (after the stage-output capture, if any); or why there is no such place."""
    handoff, else_block, after = found.index, found.else_block, found.after
    finals_top, finals_else = reads.finals_top, reads.finals_else
    # Where the last stage gathers: before the first statement that reads the captures
    # (after the stage-output capture, if any).
    collect_in_else = None
    collect_before = None
    else_readers = [
        k for k, s in enumerate(else_block) if _mentions(s, aux_name) and k not in finals_else
    ]
    if finals_else and else_readers:
        return f"the last-rank block reads `{aux_name}` besides capturing the output"
    if else_readers:
        collect_in_else = else_readers[0]
        if collect_in_else == 0:
            return f"the last stage reads `{aux_name}` before `{HIDDEN}` is final"
    else:
        first = finals_top[-1] + 1 if finals_top else 0
        readers = [k for k in range(first, len(after)) if _mentions(after[k], aux_name)]
        if not readers:
            return f"the last stage never reads `{aux_name}`"
        collect_before = handoff + 1 + readers[0]
    return collect_before, collect_in_else


#: ``getattr(layer, "_is_layer_to_capture", False)`` or ``layer._is_layer_to_capture``.
_FLAG_TEST = m.Call(
    func=m.Name("getattr"),
    args=[m.Arg(), m.Arg(m.SimpleString(f'"{LAYER_FLAG}"')), m.Arg(m.Name("False"))],
) | m.Attribute(attr=m.Name(LAYER_FLAG))

#: ``i in self.<ids>``: the gathered collector's test when it reads the capture ids.
_ID_TEST = m.Comparison(
    left=m.Name(),
    comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
)

#: ``self.end_layer in self.<ids>``: the last stage captures its output.
_END_TEST = m.Comparison(
    left=m.Attribute(value=m.Name("self"), attr=m.Name("end_layer")),
    comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
)


#: ``num_layers = self.config.num_hidden_layers``: on the last stage ``num_layers in
#: self.<ids>`` tests the same id as ``self.end_layer in self.<ids>`` (gemma4_causal).
_TOTAL_LAYERS = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name())],
            value=m.Attribute(
                value=m.Attribute(value=m.Name("self"), attr=m.Name("config")),
                attr=m.Name("num_hidden_layers"),
            ),
        )
    ]
)


def _end_test(body: list[cst.BaseStatement], handoff: int) -> m.BaseMatcherNode:
    """The test of the last stage's output capture: ``self.end_layer in self.<ids>``,
    or ``n in self.<ids>`` for a local ``n`` set once, before the handoff, to the
    number of layers and never changed."""
    names = [
        name_value(only_assign(statement).targets[0].target)
        for statement in body[:handoff]
        if m.matches(statement, _TOTAL_LAYERS)
    ]
    totals = [
        name
        for name in dict.fromkeys(names)
        if names.count(name) == 1
        and sum(
            1
            for assign in findall(cst.IndentedBlock(body=body), m.Assign())
            for target in assign.targets
            if m.matches(target.target, m.Name(name))
        )
        == 1
    ]
    if not totals:
        return _END_TEST
    return _END_TEST | m.Comparison(
        left=m.OneOf(*(m.Name(name) for name in totals)) if len(totals) > 1 else m.Name(totals[0]),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )


def _final_capture(
    statement: cst.CSTNode, aux_name: str, end_test: m.BaseMatcherNode = _END_TEST
) -> bool:
    """A statement that fills ``aux_name`` only when ``self.end_layer`` is a capture id."""
    return bool(
        findall(statement, m.Attribute(value=m.Name(aux_name), attr=m.Name()))
        and findall(statement, end_test)
    )


SHAPE = layer_entry_shape(
    "entry",
    "captures at layer entry through a callback or the gathered collector",
    (CALLBACK, GATHERED),
    is_entry_forward,
    analyse_forward,
)
