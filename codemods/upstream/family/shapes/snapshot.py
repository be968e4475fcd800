"""Decoder-stack forwards that take an explicit snapshot at layer entry (nemotron_h).

Some 0.5.22+ decoder stacks do not hand a callback to their layers: the loop asks the
layer's boundary for a snapshot of the residual stream before the layer runs and appends
it to a plain list; the last stage may also snapshot its own output (capture id
``num_layers``).  The handoff is the same as for the layer-entry callback forwards::

        aux_hidden_states = []
        for i in range(self.start_layer, self.end_layer):
            if i in self.layers_to_capture:
                hidden_states, snapshot = self.layers[i].boundary.capture_output(
                    hidden_states, forward_batch
                )
                aux_hidden_states.append(snapshot)
            ...
            hidden_states = layer.forward(...)

        if not self.pp_group.is_last_rank:
            return residual_batch.to_pp(hidden_states, forward_batch)
        hidden_states = residual_batch.complete_output(hidden_states, forward_batch)
        if self.end_layer in self.layers_to_capture:
            aux_hidden_states.append(
                residual_batch.snapshot(hidden_states, forward_batch)
            )
        hidden_states = residual_batch.final_norm(...)
        if aux_hidden_states:
            return hidden_states, aux_hidden_states

Capture id ``i`` is taken in iteration ``i``, before layer ``i`` runs, on the stage that
owns layer ``i``: the same agreement as the callback forwards.  :func:`analyse_forward`
recognises the shape (kind :data:`SNAPSHOT_KIND`) and the rewrite is the one of the callback
forwards (:func:`~codemods.upstream.family.layer_entry.rewrite.rewrite_forward`): non-last
stages add their captures to the ``PPProxyTensors`` that ``to_pp`` builds
(``pp_aux_handoff``), and the last stage gathers them (``pp_aux_collect``) right before it
first reads the list, after its own output snapshot, which stays last (``final=True``).  The
list comes back as a plain ``list``, as a single-stage run returns it.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import COLLECT, HANDOFF
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import CaptureKind, ForwardShape
from codemods.upstream.family.layer_entry.handoff import PROXY_ARG, handoff_index
from codemods.upstream.family.layer_entry.shape import layer_entry_shape
from codemods.upstream.family.loops.forms import LoopSite, form_of, stage_loop_problem
from codemods.upstream.family.syntax import IDS_ATTR, SELF_IDS, name_value, only_assign

_SNAPSHOT_DESCRIPTION = (
    "snapshot at layer entry appended to a list (`layers[i].boundary.capture_output(...)`)"
)
#: The layer loop appends a snapshot taken before the layer runs.
SNAPSHOT = CaptureKind(
    "entry-snapshot", _SNAPSHOT_DESCRIPTION, f"models whose capture is {_SNAPSHOT_DESCRIPTION}"
)
#: ``ForwardShape.capture_kinds`` entry of the forwards this module recognises.
SNAPSHOT_KIND = SNAPSHOT.name

#: ``self.end_layer in self.<ids>``: the last stage snapshots its output.
_END_TEST = m.Comparison(
    left=m.Attribute(value=m.Name("self"), attr=m.Name("end_layer")),
    comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
)


def _empty_list_name(statement: cst.CSTNode) -> str | None:
    """``name`` for a top-level ``name = []``."""
    if m.matches(
        statement,
        m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.List(elements=[]))]
        ),
    ):
        return name_value(only_assign(statement).targets[0].target)
    return None


def _capturing_loops(body: list[cst.BaseStatement]) -> list[tuple[int, cst.For, str]]:
    """Top-level loops that append to a list created as ``[]`` earlier in ``body``
    under a capture-id test: (index, loop, list name)."""
    created: dict[str, int] = {}
    found = []
    for index, statement in enumerate(body):
        name = _empty_list_name(statement)
        if name is not None:
            created[name] = index
            continue
        if not isinstance(statement, cst.For):
            continue
        for name in created:
            append = m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("append")))
            if findall(statement, append) and findall(statement, SELF_IDS):
                found.append((index, statement, name))
    return found


def is_snapshot_forward(fn: cst.FunctionDef) -> bool:
    """Cheap test: a top-level loop appends to a ``[]`` list under a capture-id test and
    the forward hands off with ``return residual_batch.to_pp(...)``."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return False
    body = list(fn.body.body)
    return handoff_index(body) is not None and bool(_capturing_loops(body))


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return bool(findall(node, m.Name(name)))


def analyse_forward(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """The forward's shape, or one whose ``problem`` says what was looked for."""

    def reject(problem: str) -> ForwardShape:
        return ForwardShape(class_name, line, capture_kinds=(SNAPSHOT_KIND,), problem=problem)

    proxy_param = next(
        (p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"), None
    )
    if proxy_param is None:
        return reject("forward takes no pp_proxy_tensors (model does not run under PP)")
    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    body = list(fn.body.body)
    loops = _capturing_loops(body)
    if len(loops) != 1:
        return reject("captures are appended in more than one layer loop")
    loop_index, loop, aux_name = loops[0]
    creations = [k for k, s in enumerate(body) if _empty_list_name(s) == aux_name]
    if len(creations) != 1 or creations[0] > loop_index:
        return reject(f"`{aux_name} = []` is not created once, before the layer loop")
    list_index = creations[0]
    problem = stage_loop_problem(LoopSite(body, loop_index, loop))
    if problem is not None:
        return reject(problem)
    form = form_of(loop)
    assert form is not None  # stage_loop_problem accepts a form of the table only
    loop_var = form.index(loop)

    # The capture: the first statement of the loop body is ``if i in self.<ids>:``,
    # which appends one snapshot, before the layer runs.
    statements = list(loop.body.body)
    by_id = m.If(
        test=m.Comparison(
            left=m.Name(loop_var),
            comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
        ),
        orelse=None,
    )
    if (
        not statements
        or not isinstance(statements[0], cst.If)
        or not m.matches(statements[0], by_id)
    ):
        return reject(
            f"the loop does not start with `if {loop_var} in self.{IDS_ATTR}:` "
            "(a snapshot before the layer runs)"
        )
    branch = statements[0]
    appends = findall(
        branch.body, m.Call(func=m.Attribute(value=m.Name(aux_name), attr=m.Name("append")))
    )
    if len(appends) != 1 or len(appends[0].args) != 1:
        return reject(f"the capture block does not append one snapshot to `{aux_name}`")
    if any(_mentions(s, aux_name) for s in statements[1:]):
        return reject(f"`{aux_name}` is used in the loop besides the capture block")
    if any(findall(s, SELF_IDS) for s in statements[1:]):
        return reject("the loop reads the capture ids besides the capture block")

    # The handoff, after the loop; the list is untouched between them.
    handoff = handoff_index(body)
    if handoff is None or handoff < loop_index:
        return reject("no `return residual_batch.to_pp(...)` after the layer loop")
    for statement in body[list_index + 1 : handoff]:
        if statement is not loop and _mentions(statement, aux_name):
            return reject(f"`{aux_name}` is used between the layer loop and the PP handoff")
    handoff_if = body[handoff]
    assert isinstance(handoff_if, cst.If)  # handoff_index(body)
    if handoff_if.orelse is not None:
        return reject("the PP handoff has an `else` or `elif` block")
    if _mentions(handoff_if, aux_name):
        return reject(f"the non-last-rank branch already uses `{aux_name}`")
    if any(_mentions(s, HANDOFF) or _mentions(s, COLLECT) for s in body):
        return reject("the forward already calls the PP aux glue")

    # The last stage: an optional snapshot of its output, then the first reader.
    after = body[handoff + 1 :]
    aux_attr = m.Attribute(value=m.Name(aux_name), attr=m.Name())
    finals = [k for k, s in enumerate(after) if findall(s, aux_attr) and findall(s, _END_TEST)]
    if len(finals) > 1:
        return reject("the stage output is snapshotted more than once")
    for k in finals:
        final = after[k]
        attrs = findall(final, aux_attr)
        if not (
            isinstance(final, cst.If)
            and m.matches(final.test, _END_TEST)
            and final.orelse is None
            and len(attrs) == 1
            and attrs[0].attr.value == "append"
        ):
            return reject(
                "the stage output is captured other than by one append under "
                "`if self.end_layer in self.<ids>:`"
            )
    ids_reads = findall(fn, SELF_IDS)
    ids_attrs = sorted({node.attr.value for node in ids_reads})
    if len(ids_attrs) != 1 or len(ids_reads) != 1 + len(finals):
        return reject("reads capture ids outside the capture block and the output snapshot")
    first = finals[-1] + 1 if finals else 0
    readers = [k for k in range(first, len(after)) if _mentions(after[k], aux_name)]
    if not readers:
        return reject(f"the last stage never reads `{aux_name}`")
    if any(findall(after[k], aux_attr) for k in readers):
        return reject(f"the last stage fills `{aux_name}` after the output snapshot")
    if not any(
        findall(s, m.Assign(targets=[m.AssignTarget(m.Name("hidden_states"))]))
        for s in statements[1:]
    ):
        return reject("the layer loop does not assign `hidden_states`")
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=(SNAPSHOT_KIND,),
        proxy_arg=PROXY_ARG,
        proxy_param=proxy_param,
        collect_before=handoff + 1 + readers[0],
        ids_attr=ids_attrs[0],
        final_capture=bool(finals),
    )


SHAPE = layer_entry_shape(
    "snapshot",
    "snapshots at layer entry appended to a list",
    (SNAPSHOT,),
    is_snapshot_forward,
    analyse_forward,
)
