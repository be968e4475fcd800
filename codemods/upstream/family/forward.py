"""Recognise a model family's decoder-stack forward: it collects ``aux_hidden_states`` at the
start of layer ``i`` (or after it) for ``i in self.layers_to_capture`` (appended in the loop,
or handed to the layer as ``captured_last_layer_outputs``), possibly under a stage-invariant
condition, and returns ``PPProxyTensors({...})`` on non-last ranks.  Read-only; a shape it
does not recognise carries the reason (the 0.5.21+ layer-entry shape is
:mod:`codemods.upstream.family.shapes.entry`'s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.syntax import (
    _PP_GROUP,
    CAPTURE_KWARG,
    IDS_ATTR,
    LAYER_FLAG,
    OUTGOING_LOCAL,
    SELF_IDS,
    code_of,
    conjuncts_of,
    node_ids,
    non_last_return_index,
    proxy_return_of,
)


@dataclass(frozen=True)
class ForwardShape:
    """The forward of a class that reads ``self.layers_to_capture``."""

    class_name: str
    line: int
    aux_name: str | None = None
    capture_kinds: tuple[str, ...] = ()
    proxy_arg: str | None = None  # "dict" or "name"
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
    problem: str | None = None

    @property
    def recognised(self) -> bool:
        return self.problem is None


def _ids_test(loop_var: str) -> m.BaseMatcherNode:
    return m.Comparison(
        left=m.Name(loop_var),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
    )


_FLAG_TEST = m.Call(
    func=m.Name("getattr"),
    args=[m.Arg(m.Name()), m.Arg(m.SimpleString(f'"{LAYER_FLAG}"')), m.Arg(m.Name("False"))],
) | m.Attribute(value=m.Name(), attr=m.Name(LAYER_FLAG))


def forward_shape(class_name: str, fn: cst.FunctionDef, line: int) -> ForwardShape:
    """Classify a forward that reads the capture ids; ``problem`` says why it is not ours."""

    def reject(problem: str, **known) -> ForwardShape:
        return ForwardShape(class_name, line, problem=problem, **known)

    from codemods.upstream.family.shapes import entry as family_entry  # imports this module

    if family_entry.is_entry_forward(fn):
        return family_entry.analyse_forward(class_name, fn, line)
    from codemods.upstream.family.shapes import snapshot as family_snapshot

    if family_snapshot.is_snapshot_forward(fn):
        return family_snapshot.analyse_forward(class_name, fn, line)
    from codemods.upstream.family.shapes import gated as family_entry_gated

    if family_entry_gated.is_gated_forward(fn):
        return family_entry_gated.analyse_forward(class_name, fn, line)
    if not isinstance(fn.body, cst.IndentedBlock):
        return reject("forward has no block body")
    body = list(fn.body.body)
    proxy_param = next(
        (p.name.value for p in fn.params.params if p.name.value == "pp_proxy_tensors"), None
    )
    if proxy_param is None:
        return reject("forward takes no pp_proxy_tensors (model does not run under PP)")
    handoff = non_last_return_index(body)
    if handoff is None:
        return reject("no `return PPProxyTensors(...)` under `if not ...is_last_rank`")
    proxy_value = proxy_return_of(body[handoff]).value.args
    if len(proxy_value) != 1:
        return reject("PPProxyTensors(...) does not take one dict")
    arg = proxy_value[0].value
    if isinstance(arg, cst.Dict):
        proxy_arg = "dict"
        if any(not isinstance(el, cst.DictElement) for el in arg.elements) or any(
            "\n" in code_of(el.key) + code_of(el.value) or "#" in code_of(el)
            for el in arg.elements
        ):
            return reject("PPProxyTensors dict has multi-line entries or comments")
    elif isinstance(arg, cst.Name):
        proxy_arg = "name"
    else:
        return reject("PPProxyTensors(...) argument is neither a dict literal nor a name")

    ids_attrs = sorted({node.attr.value for node in findall(fn, SELF_IDS)})
    if len(ids_attrs) > 1:
        return reject(f"reads capture ids from several attributes ({', '.join(ids_attrs)})")
    ids_attr = ids_attrs[0] if ids_attrs else IDS_ATTR

    kinds: list[str] = []
    aux_names: set[str] = set()
    accounted: list[cst.CSTNode] = []
    gates: set[tuple[str, ...]] = set()
    gate_assignments: set[int] = set()
    for loop in findall(fn, m.For()):
        loop_var = _layer_loop_var(loop)
        if loop_var is None:
            continue
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
                return reject(f"`if {loop_var} in self.{ids_attr}` block appends nothing")
            found = _gate_of(body, loop, [c for c in conjuncts if c is not by_id[0]])
            if isinstance(found, str):
                return reject(found)
            gate, assignments = found
            gates.add(gate)
            gate_assignments.update(assignments)
            accounted.extend(body[k] for k in assignments)
            aux_names.update(call.func.value.value for call in appended)
            # Either way the capture of id i is taken in iteration i, on the stage
            # that owns layer i: before the layer runs (ids stored as layer + 1) or
            # after it (raw layer ids).
            kinds.append("loop-append" if _before_layer_call(loop, branch) else "after-layer")
            accounted.append(branch.test)
        boundary = _boundary_captures(body, loop, loop_var)
        if boundary is not None:
            names, tests = boundary
            aux_names.update(names)
            kinds.append("boundaries")
            accounted.extend(tests)
        for arg_node in findall(loop, m.Arg(keyword=m.Name(CAPTURE_KWARG))):
            value = arg_node.value
            if m.matches(
                value,
                m.IfExp(
                    test=_ids_test(loop_var) | _FLAG_TEST,
                    body=m.Name(),
                    orelse=m.Name("None"),
                ),
            ):
                aux_names.add(value.body.value)
                by_id = m.matches(value.test, m.Comparison())
                kinds.append("layer-kwarg" if by_id else "layer-flag")
                accounted.append(value.test)
            elif not m.matches(value, m.Name("None")):
                return reject(f"unrecognised `{CAPTURE_KWARG}=` value: {code_of(value)}")
    if not kinds:
        tests = [
            code_of(node.test)
            for node in findall(fn, m.If())
            if findall(node.test, SELF_IDS)
        ]
        where = f"; captures under `{' '.join(tests[0].split())}`" if tests else ""
        return reject(f"no capture in iteration i of the layer loop (`i in self.{ids_attr}`){where}")
    if len(aux_names) != 1:
        return reject(f"captures go to several lists: {', '.join(sorted(aux_names))}")
    aux_name = aux_names.pop()
    if len(gates) > 1:
        return reject("captures are taken under different conditions")
    gate_parts = gates.pop() if gates else ()
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

    final_capture = False
    collect_before: int | None = None
    for reference in findall(fn, _SIZE_READ):
        accounted.append(reference)  # emptiness / size checks read the same on every rank
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
        if statement_index > init_index and m.matches(owner, _LAST_RANK_CAPTURE):
            # Captures the stage output on the last rank before the handoff: the
            # gathered captures of all stages must come first.
            final_capture = True
            if collect_before is None:
                collect_before = statement_index
            continue
        snippet = code_of(owner).strip().splitlines()[0] if owner is not None else "?"
        return reject(f"reads capture ids outside the recognised capture point: `{snippet}`")
    if gate_parts and final_capture:
        return reject("captures the stage output as well as under a condition")
    return ForwardShape(
        class_name,
        line,
        aux_name=aux_name,
        capture_kinds=tuple(dict.fromkeys(kinds)),
        proxy_arg=proxy_arg,
        proxy_param=proxy_param,
        final_capture=final_capture,
        collect_before=gated_collect_before if gate_parts else collect_before,
        ids_attr=ids_attr,
        gate=" and ".join(gate_parts) or None,
        gate_assignments=tuple(sorted(gate_assignments)),
        collect_in_else=collect_in_else,
        stale_comments=_last_stage_comments(body, sorted(gate_assignments)),
    )


#: ``hidden_states.shape[0] != 0`` / ``> 0``: the batch is not empty.  The token count
#: is the same on every PP stage, so such a condition holds on all stages or on none.
_NON_EMPTY = m.Comparison(
    left=m.Subscript(
        value=m.Attribute(value=m.Name(), attr=m.Name("shape")),
        slice=[m.SubscriptElement(m.Index(m.Integer("0")))],
    ),
    comparisons=[
        m.ComparisonTarget(operator=m.NotEqual() | m.GreaterThan(), comparator=m.Integer("0"))
    ],
)


def _gate_of(body, loop: cst.For, conditions) -> tuple[tuple[str, ...], list[int]] | str:
    """The capture condition besides ``i in ids``, as source parts, and the indices of
    the top-level statements defining its names; or why it may differ between stages.

    Allowed: ``<x>.shape[0] != 0`` (the token count is the same on every stage) and
    names assigned once, at the top level, before the layer loop (``capture_aux =
    ...``); a ``<pp>.is_last_rank`` operand of such a name is dropped by the rewrite.
    """
    top = next(
        (k for k, statement in enumerate(body) if any(n is loop for n in _loops_in(statement))),
        None,
    )
    parts: list[str] = []
    assignments: list[int] = []
    for condition in conditions:
        text = " ".join(code_of(condition).split())
        if m.matches(condition, _NON_EMPTY):
            parts.append(text)
            continue
        if not isinstance(condition, cst.Name) or top is None:
            return f"captures under `{text}`, which may differ between PP stages"
        index = _single_assignment(body, condition.value)
        if index is None or index >= top:
            return (
                f"capture condition `{text}` is not assigned once before the layer loop"
            )
        parts.append(text)
        assignments.append(index)
    return tuple(parts), assignments


def _loops_in(statement: cst.CSTNode) -> list[cst.CSTNode]:
    return [statement, *findall(statement, m.For())]


_LAST_STAGE_WORDS = re.compile(
    r"\b(last|final)\s+(pipeline\s+|PP\s+)?(stage|rank)\b|is_last_rank", re.IGNORECASE
)


def _last_stage_comments(body, indices: list[int]) -> tuple[str, ...]:
    """First lines of the comment blocks right above the gate assignments (or the
    statement before one) that speak of the last PP stage."""
    found = []
    for index in indices:
        for k in (index - 1, index):
            if k < 0:
                continue
            comments = [
                line.comment.value for line in body[k].leading_lines if line.comment is not None
            ]
            if comments and _LAST_STAGE_WORDS.search(" ".join(comments)):
                found.append(comments[0])
    return tuple(dict.fromkeys(found))


def _single_assignment(body, name: str) -> int | None:
    """Index of the one top-level ``name = ...`` / ``name: T = ...`` of ``body``."""
    target = m.Name(name)
    pattern = m.SimpleStatementLine(
        body=[m.Assign(targets=[m.AssignTarget(target)]) | m.AnnAssign(target=target)]
    )
    found = [k for k, statement in enumerate(body) if m.matches(statement, pattern)]
    every = sum(
        len(findall(statement, m.AssignTarget(target=target) | m.AnnAssign(target=target)))
        for statement in body
    )
    if len(found) != 1 or every != 1:
        return None
    return found[0]


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
        right=m.Comparison(
            comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)]
        ),
    )
)


def _appended_names(node: cst.CSTNode) -> list[str]:
    calls = findall(node, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append"))))
    return [call.func.value.value for call in calls]


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


def _layer_loop_var(loop: cst.For) -> str | None:
    """The global layer index of a layer loop: ``for i in range(...)``, or
    ``for i, layer in enumerate(...)`` whose body starts with ``i = i + self.start_layer``."""
    if m.matches(loop, m.For(target=m.Name(), iter=m.Call(func=m.Name("range")))):
        return loop.target.value
    if not m.matches(
        loop,
        m.For(
            target=m.Tuple(elements=[m.Element(m.Name()), m.Element(m.Name())]),
            iter=m.Call(func=m.Name("enumerate")),
        ),
    ):
        return None
    name = loop.target.elements[0].value.value
    offset = m.BinaryOperation(
        left=m.Name(name),
        operator=m.Add(),
        right=m.Attribute(value=m.Name("self"), attr=m.Name("start_layer")),
    )
    first = loop.body.body[0] if loop.body.body else None
    if m.matches(
        first,
        m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(target=m.Name(name))], value=offset)]
        ),
    ):
        return name
    return None


def _list_init_index(
    body: list[cst.BaseStatement], name: str, gate_names: set[str] = frozenset()
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
                    target=m.Tuple(
                        elements=[m.Element(m.Name("hidden_states")), m.ZeroOrMore()]
                    )
                ),
            ):
                return False
        return True
    return False
