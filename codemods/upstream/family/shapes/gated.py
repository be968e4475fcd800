"""Layer-entry forwards that capture only on the last rank (bailing_moe_v3, SGLang 0.5.21+).

Some decoder stacks hand off with ``residual_batch.to_pp`` like the layer-entry forwards
(:mod:`~codemods.upstream.family.shapes.entry`) but create their capture list only under a
gate that holds on the last PP rank alone, capture raw layer ids at the entry of the next
layer (capture id ``j`` is the input of layer ``j + 1``, the last layer's output is captured
by the final norm) and skip empty batches, before::

        capture_aux = (
            self.capture_aux_hidden_states
            and self.pp_group.is_last_rank
            and ...
        )
        if capture_aux:
            dspark_aux_hidden_states = AuxHiddenStateList()

            def capture_output(value, *, owned=False):
                if value.shape[0] != 0:
                    dspark_aux_hidden_states.capture(value, owned=owned)

        for i in range(self.start_layer, self.end_layer):
            hidden_states = layer(
                ...,
                capture_output=capture_output
                if capture_aux
                and i > self.start_layer
                and (i - 1 in self.layers_to_capture)
                else None,
            )

        if not self.pp_group.is_last_rank:
            return residual_batch.to_pp(hidden_states, forward_batch)
        else:
            hidden_states = residual_batch.complete_output(hidden_states, forward_batch)
            ...

Under PP the last stage captures only the ids of its own layers; those of earlier stages
are lost without an error.  :func:`analyse_forward` recognises the shape (kind
:data:`GATED_KIND`, or the reason it is not recognised) and :func:`rewrite_forward`
rewrites it, after::

        capture_aux = (
            self.capture_aux_hidden_states
            and ...
        )
        ...
                if capture_aux
                and i > 0
                and (i - 1 in self.layers_to_capture)
        ...
        if not self.pp_group.is_last_rank:
            handoff = residual_batch.to_pp(hidden_states, forward_batch)
            if capture_aux and handoff["hidden_states"].shape[0] != 0:
                handoff = pp_aux_handoff(
                    self, handoff, dspark_aux_hidden_states, pp_proxy_tensors
                )
            return handoff
        else:
            hidden_states = residual_batch.complete_output(hidden_states, forward_batch)
            if capture_aux and hidden_states.shape[0] != 0:
                dspark_aux_hidden_states = pp_aux_collect(
                    self, dspark_aux_hidden_states, pp_proxy_tensors
                )
            ...

Every stage captures; a stage after the first also captures id ``start_layer - 1`` at
the entry of its first layer, with the very computation a single-stage run does there
(``i > 0`` is ``i > self.start_layer`` when one stage runs every layer).  Capture id
``j`` is thus taken by the stage that runs layer ``j + 1``: the stack gets a property
(:func:`entry_ids_property`, ``pp_aux_capture_entries``: ``j + 1`` for each id) and the
hook calls ``set_pp_aux_capture`` with ``ids_attr="pp_aux_capture_entries"``, so the
shipped relay maps each capture to the stage that takes it.  Id ``num_layers - 1`` is
the last stage's output, captured by its final norm after the gathering and so kept
last.  An empty batch is empty on every stage: no stage captures, none hands captures
on and the last gathers none, so it returns ``hidden_states`` alone, as one stage does.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import COLLECT, ENTRY_IDS_ATTR, HANDOFF
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import (
    CaptureKind,
    FamilyRewriteError,
    ForwardShape,
    handoff_parts,
)
from codemods.upstream.family.gate import (
    every_stage,
    last_stage_comments,
    refresh_last_stage_comments,
)
from codemods.upstream.family.layer_entry.handoff import handoff_index
from codemods.upstream.family.layer_entry.shape import layer_entry_shape
from codemods.upstream.family.loops.forms import (
    STAGE_RANGES,
    LoopSite,
    layer_index,
    stage_loop_problem,
)
from codemods.upstream.family.syntax import (
    LAST_RANK,
    NOT_LAST_RANK,
    SELF_IDS,
    code_of,
    conjuncts_of,
    name_value,
    only_assign,
    returned_value,
)

#: The callback captures at the next layer's entry, under a gate.
GATED = CaptureKind(
    "entry-gated",
    "callback at the next layer's entry under a last-rank gate (`i - 1 in "
    "self.layers_to_capture`, raw layer ids)",
    "last-rank-gated layer entry",
)
#: ``ForwardShape.capture_kinds`` entry of a forward this module rewrites.
GATED_KIND = GATED.name
#: Local name of the rewritten handoff.
HANDOFF_LOCAL = "handoff"

_COLLECTOR = m.Call(func=m.Name("AuxHiddenStateList"), args=[])
_START = m.Attribute(value=m.Name("self"), attr=m.Name("start_layer"))
_EMPTY_SKIP = m.Comparison(
    left=m.Subscript(value=m.Attribute(attr=m.Name("shape"))),
    comparisons=[m.ComparisonTarget(operator=m.NotEqual(), comparator=m.Integer("0"))],
)
_TO_PP_RETURN = m.SimpleStatementLine(
    body=[
        m.Return(
            value=m.Call(func=m.Attribute(value=m.Name("residual_batch"), attr=m.Name("to_pp")))
        )
    ]
)
_COMPLETE = m.SimpleStatementLine(
    body=[
        m.Assign(
            targets=[m.AssignTarget(m.Name())],
            value=m.Call(
                func=m.Attribute(value=m.Name("residual_batch"), attr=m.Name("complete_output"))
            ),
        )
    ]
)


def _gate_index(body: Sequence[cst.CSTNode], name: str) -> int | None:
    """Index of the top-level ``name = ... and <pp>.is_last_rank and ...``, if any."""
    for k, statement in enumerate(body):
        if m.matches(
            statement,
            m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])]),
        ) and any(m.matches(c, LAST_RANK) for c in conjuncts_of(only_assign(statement).value)):
            return k
    return None


def _gated_block(body: Sequence[cst.CSTNode]) -> cst.If | None:
    gated = [
        statement
        for statement in body
        if isinstance(statement, cst.If)
        and m.matches(statement, m.If(test=m.Name()))
        and findall(statement, _COLLECTOR)
    ]
    return gated[0] if len(gated) == 1 else None


def is_gated_forward(fn: cst.FunctionDef) -> bool:
    """A forward that hands off with ``to_pp`` and creates its capture list under a
    gate that requires ``<pp>.is_last_rank``."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return False
    body = list(fn.body.body)
    block = _gated_block(body)
    return (
        handoff_index(body) is not None
        and block is not None
        and _gate_index(body, name_value(block.test)) is not None
    )


def _first_layer_skip(gate: str, loop_var: str, fn_name: str) -> m.IfExp:
    """``fn if gate and i > self.start_layer and (i - 1 in self.<ids>) else None``."""
    return m.IfExp(
        body=m.Name(fn_name),
        orelse=m.Name("None"),
        test=m.BooleanOperation(
            left=m.BooleanOperation(
                left=m.Name(gate),
                operator=m.And(),
                right=m.Comparison(
                    left=m.Name(loop_var),
                    comparisons=[m.ComparisonTarget(operator=m.GreaterThan(), comparator=_START)],
                ),
            ),
            operator=m.And(),
            right=m.Comparison(
                left=m.BinaryOperation(
                    left=m.Name(loop_var), operator=m.Subtract(), right=m.Integer("1")
                ),
                comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
            ),
        ),
    )


def _layer_loop(body: Sequence[cst.BaseStatement], fn_name: str) -> tuple[cst.For, str] | str:
    """The one loop that hands ``fn_name`` to the layers and its layer index, or why
    there is no such loop over the stage's layers (loop forms:
    :mod:`~codemods.upstream.family.loops.forms`)."""
    holders = [
        (k, loop)
        for k, statement in enumerate(body)
        for loop in findall(statement, m.For())
        if findall(loop, m.Name(fn_name))
    ]
    if len(holders) != 1:
        return f"`{fn_name}` is not handed to layers in one loop"
    index, loop = holders[0]
    problem = stage_loop_problem(LoopSite(body, index, loop))
    loop_var = layer_index(loop, STAGE_RANGES)
    if problem is not None or loop_var is None:
        return problem or f"`{fn_name}` is not handed to layers in one loop"
    return loop, loop_var


def analyse_forward(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """The shape of a forward :func:`is_gated_forward` holds for; ``problem`` says what
    does not match the rewrite.  The steps: the collector and its capture function
    (:func:`_collector`), the layer loop (:func:`_layer_loop`), the capture point
    (:func:`_capture_point`), the handoff (:func:`_handoff_problem`)."""

    def reject(problem: str) -> ForwardShape:
        return ForwardShape(class_name, line, capture_kinds=(GATED_KIND,), problem=problem)

    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    body = list(fn.body.body)
    block = _gated_block(body)
    assert block is not None  # is_gated_forward(fn)
    gate = name_value(block.test)
    gate_index = _gate_index(body, gate)
    assert gate_index is not None  # is_gated_forward(fn)
    collector = _collector(fn, block, gate)
    if isinstance(collector, str):
        return reject(collector)
    aux_name, fn_name = collector
    proxy = [p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"]
    if not proxy:
        return reject("forward takes no pp_proxy_tensors")
    found = _layer_loop(body, fn_name)
    if isinstance(found, str):
        return reject(found)
    ids_read = _capture_point(*found, gate, fn_name)
    if isinstance(ids_read, str):
        return reject(ids_read)
    problem = _handoff_problem(body)
    if problem is not None:
        return reject(problem)
    if findall(fn, m.Name(HANDOFF_LOCAL)):
        return reject(f"the forward already uses the name `{HANDOFF_LOCAL}`")
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=(GATED_KIND,),
        proxy_param=proxy[0],
        ids_attr=ids_read.attr.value,
        gate=gate,
        gate_assignments=(gate_index,),
        # Comments the rewrite restates are not stale.
        stale_comments=()
        if refresh_last_stage_comments(body, [gate_index])[1]
        else last_stage_comments(body, [gate_index]),
    )


def _collector(fn: cst.FunctionDef, block: cst.If, gate: str) -> tuple[str, str] | str:
    """``(list, capture function)``: the ``AuxHiddenStateList()`` that ``if <gate>:``
    binds and the one local function that captures into it, skipping empty values; or
    what is not so."""
    assigns = findall(block, m.Assign(targets=[m.AssignTarget(m.Name())], value=_COLLECTOR))
    if len(assigns) != 1:
        return f"`if {gate}:` does not bind one `AuxHiddenStateList()`"
    aux_name = name_value(assigns[0].targets[0].target)
    capture = m.Call(func=m.Attribute(value=m.Name(aux_name), attr=m.Name("capture")))
    defs = [d for d in findall(block, m.FunctionDef()) if findall(d, capture)]
    if len(defs) != 1 or len(findall(fn, capture)) != 1:
        return f"`{aux_name}.capture` is not called once, by one local function"
    fn_name = defs[0].name.value
    skips = findall(defs[0], m.If(test=_EMPTY_SKIP))
    if len(skips) != 1 or not findall(skips[0], capture):
        return f"`{fn_name}` does not capture exactly the non-empty values"
    return aux_name, fn_name


def _capture_point(loop: cst.For, loop_var: str, gate: str, fn_name: str) -> cst.Attribute | str:
    """The ``self.<ids>`` the layer call tests in ``fn if gate and i > self.start_layer
    and (i - 1 in self.<ids>) else None``, or why there is no such call."""
    uses = findall(loop, _first_layer_skip(gate, loop_var, fn_name))
    if len(uses) != 1 or len(findall(loop, m.IfExp(body=m.Name(fn_name)))) != 1:
        return (
            f"no `{fn_name} if {gate} and {loop_var} > self.start_layer and "
            f"({loop_var} - 1 in self.layers_to_capture) else None` in the layer call"
        )
    return findall(uses[0], SELF_IDS)[0]


def _handoff_problem(body: list[cst.BaseStatement]) -> str | None:
    """Why the handoff is not ``if not ...is_last_rank: return residual_batch.to_pp(...)``
    with an ``else:`` block that starts by completing the output; ``None`` when it is."""
    index = handoff_index(body)
    assert index is not None  # is_gated_forward(fn)
    handoff = body[index]
    if (
        not isinstance(handoff, cst.If)
        or not m.matches(handoff, m.If(test=NOT_LAST_RANK))
        or len(handoff.body.body) != 1
        or not m.matches(handoff.body.body[0], _TO_PP_RETURN)
    ):
        return "the non-last-rank branch is not a lone `return residual_batch.to_pp(...)`"
    if not isinstance(handoff.orelse, cst.Else) or not m.matches(
        handoff.orelse.body.body[0], _COMPLETE
    ):
        return (
            "the last-rank branch does not start with "
            "`hidden_states = residual_batch.complete_output(...)`"
        )
    return None


class _EveryFirstLayer(cst.CSTTransformer):
    """``i > self.start_layer`` -> ``i > 0`` in the capture test of the layer call."""

    def __init__(self, loop_var: str) -> None:
        self.pattern = m.ComparisonTarget(operator=m.GreaterThan(), comparator=_START)
        self.loop_var = loop_var
        self.count = 0

    def leave_Comparison(self, original, updated):
        if (
            m.matches(updated.left, m.Name(self.loop_var))
            and len(updated.comparisons) == 1
            and (m.matches(updated.comparisons[0], self.pattern))
        ):
            self.count += 1
            target = updated.comparisons[0].with_changes(comparator=cst.Integer("0"))
            return updated.with_changes(comparisons=[target])
        return updated


def rewrite_forward(fn: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    """Capture on every stage, hand the captures on and gather them on the last stage."""
    body, aux_name, proxy_param = handoff_parts(fn, shape)
    (gate_index,) = shape.gate_assignments
    body[gate_index] = every_stage(body[gate_index])
    body, _ = refresh_last_stage_comments(body, [gate_index])
    index = handoff_index(body)
    handoff = body[index] if index is not None else None
    if index is None or not isinstance(handoff, cst.If):
        raise FamilyRewriteError(f"{shape.class_name}.forward has no PP handoff")
    if not isinstance(handoff.orelse, cst.Else):
        raise FamilyRewriteError(f"{shape.class_name}.forward handoff has no else block")
    for k, statement in enumerate(body):
        if isinstance(statement, cst.For) and findall(statement, SELF_IDS):
            loop_var = layer_index(statement, STAGE_RANGES)
            if loop_var is None:
                raise FamilyRewriteError(f"{shape.class_name}.forward: no layer index")
            fixer = _EveryFirstLayer(loop_var)
            fixed = statement.visit(fixer)
            assert isinstance(fixed, cst.For)  # the fixer replaces comparisons only
            body[k] = fixed
            if fixer.count != 1:
                raise FamilyRewriteError(f"{shape.class_name}.forward: no first-layer skip")
    pad = " " * 12
    returned = code_of(returned_value(handoff.body.body[0]))
    lines = [f"{pad}{HANDOFF_LOCAL} = {returned}"]
    lines.append(f'{pad}if {shape.gate} and {HANDOFF_LOCAL}["hidden_states"].shape[0] != 0:')
    lines += render_call(
        pad + "    ",
        f"{HANDOFF_LOCAL} = ",
        Call(HANDOFF, ("self", HANDOFF_LOCAL, aux_name, proxy_param)),
    )
    lines.append(f"{pad}return {HANDOFF_LOCAL}")
    new_handoff = parse_statements(lines_to_text(lines), pad)
    last = list(handoff.orelse.body.body)
    like = name_value(only_assign(last[0]).targets[0].target)
    collect = [f"{pad}if {shape.gate} and {like}.shape[0] != 0:"]
    collect += render_call(
        pad + "    ",
        f"{aux_name} = ",
        Call(COLLECT, ("self", aux_name, proxy_param)),
    )
    last[1:1] = parse_statements(lines_to_text(collect), pad)
    body[index] = handoff.with_changes(
        body=handoff.body.with_changes(body=new_handoff),
        orelse=handoff.orelse.with_changes(body=handoff.orelse.body.with_changes(body=last)),
    )
    return fn.with_changes(body=fn.body.with_changes(body=body))


def entry_ids_property(ids_attr: str) -> cst.FunctionDef:
    """The stack property that names, for the shipped relay, the layer at whose entry each
    capture id is taken (id ``j`` at layer ``j + 1``; id ``-1`` is never taken)."""
    text = (
        "@property\n"
        f"def {ENTRY_IDS_ATTR}(self):\n"
        '    """Layers at whose entry the aux capture ids are taken: id ``i`` at the\n'
        "    entry of layer ``i + 1`` (the last layer's output at the final norm), so\n"
        '    each capture belongs to the pipeline stage that runs layer ``i + 1``."""\n'
        f"    return [i + 1 for i in self.{ids_attr} if i >= 0]\n"
    )
    pad = " " * 4
    text = "".join(pad + line + "\n" for line in text.splitlines())
    (prop,) = parse_statements(text, pad)
    return prop.with_changes(leading_lines=[cst.EmptyLine(indent=False)])


def rewrite(fn: cst.FunctionDef, shape: ForwardShape) -> cst.FlattenSentinel:
    """The rewritten forward, followed by the stack property the relay reads."""
    return cst.FlattenSentinel([rewrite_forward(fn, shape), entry_ids_property(shape.ids_attr)])


SHAPE = layer_entry_shape(
    "gated",
    "captures at the next layer's entry under a last-rank gate",
    (GATED,),
    is_gated_forward,
    analyse_forward,
    rewrite,
    setter_ids_attr=ENTRY_IDS_ATTR,
)
