"""The classic decoder-stack forward: it collects ``aux_hidden_states`` at the start of layer
``i`` (or after it) for ``i in self.layers_to_capture`` (appended in the loop, or handed to
the layer as ``captured_last_layer_outputs``), possibly under a stage-invariant condition,
and returns ``PPProxyTensors({...})`` on non-last ranks.  :func:`analyse_forward` says how
it captures (or why it is not recognised); it is the last shape of the registry, so it
analyses every forward no other shape claims.

Decoder-stack forward, before::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states, "residual": residual})
        ...
        if len(aux_hidden_states) == 0:

after (non-last stages add their captures to the handoff; the last stage gathers them
all, so it returns ``(hidden_states, aux_hidden_states)`` even when it owns none)::

        if not self.pp_group.is_last_rank:
            return PPProxyTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **pp_aux_outgoing(self, aux_hidden_states, pp_proxy_tensors),
                }
            )
        ...
        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)
        if len(aux_hidden_states) == 0:

A forward that captures only under a condition (DSpark targets capture after layer
``i``, raw ids), before::

        capture_aux = (
            self.capture_aux_hidden_states
            and self.pp_group.is_last_rank
            and self.layers_to_capture is not None
        )
        ...
            if capture_aux and i in self.layers_to_capture and hidden_states.shape[0] != 0:
        ...
        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states, "residual": residual})
        else:
            ...
            if capture_aux and len(aux) > 0:

after (every stage captures; the handoff and the gathering run under the condition,
which holds on every stage or on none)::

        capture_aux = (
            self.capture_aux_hidden_states and self.layers_to_capture is not None
        )
        ...
        if not self.pp_group.is_last_rank:
            aux_outgoing = {}
            if capture_aux and hidden_states.shape[0] != 0:
                aux_outgoing = pp_aux_outgoing(self, aux, pp_proxy_tensors)
            return PPProxyTensors(
                {
                    "hidden_states": hidden_states,
                    "residual": residual,
                    **aux_outgoing,
                }
            )
        else:
            ...
            if capture_aux and hidden_states.shape[0] != 0:
                aux = pp_aux_collect(self, aux, pp_proxy_tensors)
            if capture_aux and len(aux) > 0:

A forward that packs its captures into an ``AuxHiddenStatePacker`` (deepseek_v2 before
0.5.21, mimo_v2 on 0.5.20, deepseek_v4 on 0.5.23) is not gathered after its layers: the
last stage seeds the packer right after making it
(:mod:`~codemods.upstream.family.layer_entry.seed`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import COLLECT, OUTGOING
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import (
    CaptureKind,
    ForwardShape,
    Shape,
)
from codemods.upstream.family.gate import gate_of, last_stage_comments
from codemods.upstream.family.loops.forms import layer_index
from codemods.upstream.family.loops.rewrite import rewrite_loop_forward
from codemods.upstream.family.syntax import (
    _PP_GROUP,
    CAPTURE_KWARG,
    IDS_ATTR,
    LAYER_FLAG,
    OUTGOING_LOCAL,
    SELF_IDS,
    code_of,
    conjuncts_of,
    name_value,
    node_ids,
    non_last_return_index,
    proxy_call_of,
)

LOOP_APPEND = CaptureKind(
    "loop-append", "appended in the layer loop", "layer-loop append", adds_stack_setter=True
)
AFTER_LAYER = CaptureKind(
    "after-layer",
    "appended after the layer call, raw layer ids",
    "layer-loop append",
    adds_stack_setter=True,
)
LAYER_KWARG = CaptureKind(
    "layer-kwarg",
    "handed to the layer (`captured_last_layer_outputs`)",
    "list handed to layers",
)
LAYER_FLAG_KIND = CaptureKind(
    "layer-flag", "layer flag `_is_layer_to_capture`", "list handed to layers"
)
BOUNDARIES = CaptureKind(
    "boundaries",
    "layer boundaries (`start_layer`, then `i + 1` after layer `i`)",
    "layer boundaries",
)


def _ids_test(loop_var: str) -> m.Comparison:
    return m.Comparison(
        left=m.Name(loop_var),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )


_FLAG_TEST = m.Call(
    func=m.Name("getattr"),
    args=[m.Arg(m.Name()), m.Arg(m.SimpleString(f'"{LAYER_FLAG}"')), m.Arg(m.Name("False"))],
) | m.Attribute(value=m.Name(), attr=m.Name(LAYER_FLAG))


def analyse_forward(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """Classify a forward that reads the capture ids; ``problem`` says why it is not ours.

    The steps: the handoff (:func:`_handoff`), the capture points of the layer loops
    (:data:`CAPTURE_POINTS`), the list they fill and the condition they are taken under,
    the other reads of the capture ids (:func:`_other_id_reads`)."""

    def reject(problem: str) -> ForwardShape:
        return ForwardShape(class_name, line, problem=problem)

    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    body = list(fn.body.body)
    handoff_found = _handoff(fn, body)
    if isinstance(handoff_found, str):
        return reject(handoff_found)
    proxy_param, handoff, proxy_arg = handoff_found

    ids_attrs = sorted({node.attr.value for node in findall(fn, SELF_IDS)})
    if len(ids_attrs) > 1:
        return reject(f"reads capture ids from several attributes ({', '.join(ids_attrs)})")
    ids_attr = ids_attrs[0] if ids_attrs else IDS_ATTR

    found = _captures(fn, body, ids_attr)
    if isinstance(found, str):
        return reject(found)
    if len(found.aux_names) != 1:
        return reject(f"captures go to several lists: {', '.join(sorted(found.aux_names))}")
    (aux_name,) = found.aux_names
    if len(found.gates) > 1:
        return reject("captures are taken under different conditions")
    gate_parts = next(iter(found.gates), ())
    gate_names = {part for part in gate_parts if part.isidentifier()}
    init_index = _list_init_index(body[:handoff], aux_name, gate_names)
    if init_index is None:
        return reject(f"`{aux_name}` is not created as `[]` / an accumulator before the loop")
    collect_in_else = None
    gated_collect_before = None
    if gate_parts:
        if findall(fn, m.Name(OUTGOING_LOCAL)):
            return reject(f"forward already uses the name `{OUTGOING_LOCAL}`")
        # The gathering goes where the last stage first reads its captures.
        placement = _first_reader(body, handoff, aux_name)
        if placement is None:
            return reject(f"the last stage never reads `{aux_name}`")
        gated_collect_before, collect_in_else = placement

    reads = _other_id_reads(fn, body, found.accounted, init_index, handoff)
    if isinstance(reads, str):
        return reject(reads)
    final_capture, collect_before = reads
    if gate_parts and final_capture:
        return reject("captures the stage output as well as under a condition")
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=tuple(dict.fromkeys(found.kinds)),
        proxy_arg=proxy_arg,
        proxy_param=proxy_param,
        final_capture=final_capture,
        collect_before=gated_collect_before if gate_parts else collect_before,
        ids_attr=ids_attr,
        gate=" and ".join(gate_parts) or None,
        gate_assignments=tuple(sorted(found.gate_assignments)),
        collect_in_else=collect_in_else,
        stale_comments=last_stage_comments(body, sorted(found.gate_assignments)),
    )


def _handoff(fn: cst.FunctionDef, body: list[cst.BaseStatement]) -> tuple[str, int, str] | str:
    """``(proxy parameter, index of the handoff, "dict" or "name")`` of the
    ``return PPProxyTensors(...)`` under ``if not ...is_last_rank``, or why there is none
    the rewrite can extend."""
    proxy_param = next(
        (p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"), None
    )
    if proxy_param is None:
        return "forward takes no pp_proxy_tensors (model does not run under PP)"
    handoff = non_last_return_index(body)
    if handoff is None:
        return "no `return PPProxyTensors(...)` under `if not ...is_last_rank`"
    proxy_value = proxy_call_of(body[handoff]).args
    if len(proxy_value) != 1:
        return "PPProxyTensors(...) does not take one dict"
    arg = proxy_value[0].value
    if isinstance(arg, cst.Name):
        return proxy_param, handoff, "name"
    if not isinstance(arg, cst.Dict):
        return "PPProxyTensors(...) argument is neither a dict literal nor a name"
    if any(
        not isinstance(el, cst.DictElement)
        or "\n" in code_of(el.key) + code_of(el.value)
        or "#" in code_of(el)
        for el in arg.elements
    ):
        return "PPProxyTensors dict has multi-line entries or comments"
    return proxy_param, handoff, "dict"


@dataclass
class _Captures:
    """What the capture points of the layer loops found: the capture kinds (in the order
    found), the lists they fill, the nodes that read the capture ids for them, the
    conditions (besides the id test) they are taken under, and the top-level statements
    that define those conditions."""

    kinds: list[str] = field(default_factory=list)
    aux_names: set[str] = field(default_factory=set)
    accounted: list[cst.CSTNode] = field(default_factory=list)
    gates: set[tuple[str, ...]] = field(default_factory=set)
    gate_assignments: set[int] = field(default_factory=set)


#: A capture point: reads one layer loop (``body``, the loop, its layer index, the ids
#: attribute), adds what it finds to the ``_Captures``; returns why the forward is
#: refused, or ``None``.
CapturePoint = Callable[[list[cst.BaseStatement], cst.For, str, str, _Captures], str | None]


def _captures(fn: cst.FunctionDef, body: list[cst.BaseStatement], ids_attr: str) -> _Captures | str:
    """Every capture point of every layer loop (a loop of the loop-form table), or why
    the forward is refused."""
    found = _Captures()
    for loop in findall(fn, m.For()):
        loop_var = layer_index(loop)
        if loop_var is None:
            continue
        for point in CAPTURE_POINTS:
            problem = point(body, loop, loop_var, ids_attr, found)
            if problem is not None:
                return problem
    if not found.kinds:
        tests = [code_of(node.test) for node in findall(fn, m.If()) if findall(node.test, SELF_IDS)]
        where = f"; captures under `{' '.join(tests[0].split())}`" if tests else ""
        return f"no capture in iteration i of the layer loop (`i in self.{ids_attr}`){where}"
    return found


def _appended_by_id(
    body: list[cst.BaseStatement], loop: cst.For, loop_var: str, ids_attr: str, found: _Captures
) -> str | None:
    """``if i in self.<ids> [and <gate>]: aux.append(...)`` before the layer call (kind
    ``loop-append``) or after it (``after-layer``)."""
    for branch in findall(loop, m.If()):
        conjuncts = conjuncts_of(branch.test)
        by_id = [c for c in conjuncts if m.matches(c, _ids_test(loop_var))]
        if not by_id:
            continue
        appended = findall(
            branch.body,
            m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append"))),
        )
        if not appended:
            return f"`if {loop_var} in self.{ids_attr}` block appends nothing"
        gated = gate_of(body, loop, [c for c in conjuncts if c is not by_id[0]])
        if isinstance(gated, str):
            return gated
        gate, assignments = gated
        found.gates.add(gate)
        found.gate_assignments.update(assignments)
        found.accounted.extend(body[k] for k in assignments)
        found.aux_names.update(_appended_name(call) for call in appended)
        # Either way the capture of id i is taken in iteration i, on the stage
        # that owns layer i: before the layer runs (ids stored as layer + 1) or
        # after it (raw layer ids).
        before = _before_layer_call(loop, branch)
        found.kinds.append(LOOP_APPEND.name if before else AFTER_LAYER.name)
        found.accounted.append(branch.test)
    return None


def _at_boundaries(
    body: list[cst.BaseStatement], loop: cst.For, loop_var: str, ids_attr: str, found: _Captures
) -> str | None:
    """Captures at the layer boundaries (kind ``boundaries``, :func:`_boundary_captures`)."""
    boundary = _boundary_captures(body, loop, loop_var)
    if boundary is not None:
        names, tests = boundary
        found.aux_names.update(names)
        found.kinds.append(BOUNDARIES.name)
        found.accounted.extend(tests)
    return None


def _handed_to_layer(
    body: list[cst.BaseStatement], loop: cst.For, loop_var: str, ids_attr: str, found: _Captures
) -> str | None:
    """``captured_last_layer_outputs=aux if i in self.<ids> else None`` (kind
    ``layer-kwarg``) or ``... if <layer flag> else None`` (``layer-flag``)."""
    for arg_node in findall(loop, m.Arg(keyword=m.Name(CAPTURE_KWARG))):
        value = arg_node.value
        if isinstance(value, cst.IfExp) and m.matches(
            value,
            m.IfExp(
                test=m.OneOf(_ids_test(loop_var), *_FLAG_TEST.options),
                body=m.Name(),
                orelse=m.Name("None"),
            ),
        ):
            found.aux_names.add(name_value(value.body))
            compared = m.matches(value.test, m.Comparison())
            found.kinds.append(LAYER_KWARG.name if compared else LAYER_FLAG_KIND.name)
            found.accounted.append(value.test)
        elif not m.matches(value, m.Name("None")):
            return f"unrecognised `{CAPTURE_KWARG}=` value: {code_of(value)}"
    return None


#: The capture points of the classic shape, in the order each layer loop is read.
CAPTURE_POINTS: tuple[CapturePoint, ...] = (_appended_by_id, _at_boundaries, _handed_to_layer)


def _other_id_reads(
    fn: cst.FunctionDef,
    body: list[cst.BaseStatement],
    accounted: list[cst.CSTNode],
    init_index: int,
    handoff: int,
) -> tuple[bool, int | None] | str:
    """The reads of the capture ids besides the capture points: ``(the last stage captures
    its output, index of the top-level statement the gathering must precede)``, or the
    read that is not recognised."""
    final_capture = False
    collect_before: int | None = None
    # emptiness / size checks read the same on every rank
    accounted = [*accounted, *findall(fn, _SIZE_READ)]
    accounted_ids: set[int] = set().union(*(node_ids(node) for node in accounted))
    statement_ids = [node_ids(statement) for statement in body]
    for reference in findall(fn, SELF_IDS):
        if id(reference) in accounted_ids:
            continue
        statement_index = next(
            (k for k, ids in enumerate(statement_ids) if id(reference) in ids), -1
        )
        owner = body[statement_index] if statement_index >= 0 else None
        if statement_index == init_index:
            continue  # e.g. AuxHiddenStatePacker(len(self.layers_to_capture))
        if statement_index > handoff:
            final_capture = True  # last stage only: captures the stage output
            continue
        if (
            statement_index > init_index
            and owner is not None
            and m.matches(owner, _LAST_RANK_CAPTURE)
        ):
            # Captures the stage output on the last rank before the handoff: the
            # gathered captures of all stages must come first.
            final_capture = True
            if collect_before is None:
                collect_before = statement_index
            continue
        snippet = code_of(owner).strip().splitlines()[0] if owner is not None else "?"
        return f"reads capture ids outside the recognised capture point: `{snippet}`"
    return final_capture, collect_before


def _first_reader(body, handoff: int, aux_name: str) -> tuple[int | None, int | None] | None:
    """Where the last stage first reads ``aux_name`` after the handoff: ``(top-level
    index, None)``, or ``(None, index in the handoff's else block)``."""
    reads = m.Name(aux_name)
    branch = body[handoff]
    if isinstance(branch.orelse, cst.Else):
        for k, statement in enumerate(branch.orelse.body.body):
            if findall(statement, reads):
                return None, k
    for k in range(handoff + 1, len(body)):
        if findall(body[k], reads):
            return k, None
    return None


_SIZE_READ = m.UnaryOperation(operator=m.Not(), expression=SELF_IDS) | m.Call(
    func=m.Name("len"), args=[m.Arg(SELF_IDS)]
)


_LAST_RANK_CAPTURE = m.If(
    test=m.BooleanOperation(
        left=m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank")),
        operator=m.And(),
        right=m.Comparison(comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)]),
    )
)


def _appended_name(call: cst.Call) -> str:
    """``aux`` of an ``aux.append(...)`` call matched as one."""
    assert isinstance(call.func, cst.Attribute)
    return name_value(call.func.value)


def _appended_names(node: cst.CSTNode) -> list[str]:
    calls = findall(node, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append"))))
    return [_appended_name(call) for call in calls]


def _boundary_captures(body, loop: cst.For, loop_var: str):
    """Captures at layer boundaries: ``if self.start_layer in ids`` before a top-level
    loop, and ``if i + 1 in ids`` after the layer call inside it (boundary ``i + 1`` is
    the output of layer ``i``).  Returns (aux names, the tests) or ``None``."""
    if loop not in body:
        return None
    start_test = m.Comparison(
        left=m.Attribute(value=m.Name("self"), attr=m.Name("start_layer")),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )
    after_test = m.Comparison(
        left=m.BinaryOperation(left=m.Name(loop_var), operator=m.Add(), right=m.Integer("1")),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )
    before = body[: body.index(loop)]
    starts = [stmt for stmt in before if m.matches(stmt, m.If(test=start_test))]
    afters = findall(loop, m.If(test=after_test))
    if len(starts) != 1 or len(afters) != 1:
        return None
    names = _appended_names(starts[0]) + _appended_names(afters[0])
    if not names or _before_layer_call(loop, afters[0]):
        return None
    return names, [starts[0].test, afters[0].test]


def _list_init_index(
    body: list[cst.BaseStatement], name: str, gate_names: Collection[str] = frozenset()
) -> int | None:
    """Index of the top-level ``name = []`` (or ``name: T = []``, or an accumulator
    call), possibly inside ``if <gate name>:``."""
    value = m.List(elements=[]) | m.Call(func=m.Name())
    pattern = m.SimpleStatementLine(
        body=[
            m.Assign(targets=[m.AssignTarget(target=m.Name(name))], value=value)
            | m.AnnAssign(target=m.Name(name), value=value)
        ]
    )
    gated = m.If(
        test=m.Name(value=m.MatchIfTrue(lambda v: v in gate_names)),
        body=m.IndentedBlock(body=[pattern]),
        orelse=None,
    )
    for index, statement in enumerate(body):
        if m.matches(statement, pattern) or m.matches(statement, gated):
            return index
    return None


def _before_layer_call(loop: cst.For, branch: cst.If) -> bool:
    """``branch`` runs before anything in its block assigns ``hidden_states``."""
    for block in findall(loop, m.IndentedBlock()):
        statements = list(block.body)
        if branch not in statements:
            continue
        for statement in statements[: statements.index(branch)]:
            if findall(statement, m.AssignTarget(target=m.Name("hidden_states"))) or findall(
                statement,
                m.AssignTarget(
                    target=m.Tuple(elements=[m.Element(m.Name("hidden_states")), m.ZeroOrMore()])
                ),
            ):
                return False
        return True
    return False


def rewrite_forward(fn: cst.FunctionDef, shape: ForwardShape) -> cst.FunctionDef:
    """Add this stage's captures to the handoff; gather all of them on the last stage
    (:func:`~codemods.upstream.family.loops.rewrite.rewrite_loop_forward`)."""
    return rewrite_loop_forward(fn, shape, boundaries=BOUNDARIES.name in shape.capture_kinds)


SHAPE = Shape(
    name="loop",
    description="captures in the layer loop, handed on in `PPProxyTensors({...})`",
    kinds=(LOOP_APPEND, AFTER_LAYER, LAYER_KWARG, LAYER_FLAG_KIND, BOUNDARIES),
    claims=lambda fn: True,
    analyse=analyse_forward,
    rewrite=rewrite_forward,
    glue=(COLLECT, OUTGOING),
    handoffs={"dict": "PPProxyTensors({...})", "name": "PPProxyTensors(name)"},
)
