"""Layer-entry forwards that capture only on the last rank (bailing_moe_v3, SGLang 0.5.21+).

Some decoder stacks hand off with ``residual_batch.to_pp`` like the layer-entry forwards
(``family_entry``) but create their capture list only under a gate that holds on the last
PP rank alone, and capture raw layer ids at the entry of the next layer::

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

Under PP the last stage captures only the ids of its own layers; those of earlier stages
are lost without an error.  The family rewrite does not cover this shape yet (the gate,
the capture of id ``start_layer - 1`` that no stage takes, and the empty batches the
capture function skips would all need changes), so :func:`gated_entry_problem` names
what the forward does, for the report, instead of the generic reason.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from codemods.upstream.family_entry_handoff import handoff_index
from codemods.upstream.family_syntax import code_of, conjuncts_of

_COLLECTOR = m.Call(func=m.Name("AuxHiddenStateList"), args=[])
_LAST_RANK = m.Attribute(attr=m.Name("is_last_rank"))
_FIRST_LAYER_SKIP = m.Comparison(
    left=m.Name(),
    comparisons=[
        m.ComparisonTarget(
            operator=m.GreaterThan(),
            comparator=m.Attribute(value=m.Name("self"), attr=m.Name("start_layer")),
        )
    ],
)
_EMPTY_SKIP = m.Comparison(
    left=m.Subscript(value=m.Attribute(attr=m.Name("shape"))),
    comparisons=[m.ComparisonTarget(operator=m.NotEqual(), comparator=m.Integer("0"))],
)


def _gate(body: list[cst.BaseStatement], name: str) -> tuple[str, str] | None:
    """``(pp group, source)`` of the top-level ``name = ... and <pp>.is_last_rank and
    ...``, if any."""
    for statement in body:
        if not m.matches(
            statement,
            m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])]),
        ):
            continue
        value = statement.body[0].value
        for conjunct in conjuncts_of(value):
            if m.matches(conjunct, _LAST_RANK):
                return code_of(conjunct.value), " ".join(code_of(value).split())
    return None


def gated_entry_problem(fn: cst.FunctionDef) -> str | None:
    """What a forward of this shape does, as the reason it is not rewritten; ``None``
    for any other forward."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return None
    body = list(fn.body.body)
    if handoff_index(body) is None:
        return None
    gated = [
        statement for statement in body
        if m.matches(statement, m.If(test=m.Name())) and m.findall(statement, _COLLECTOR)
    ]
    if len(gated) != 1:
        return None
    name = gated[0].test.value
    found = _gate(body, name)
    if found is None:
        return None
    pp_group, _ = found
    details = []
    if m.findall(fn, _FIRST_LAYER_SKIP):
        details.append("never at its stage's first layer (`i > self.start_layer`)")
    if m.findall(gated[0], _EMPTY_SKIP):
        details.append("skips empty batches in its capture function")
    extra = "".join(f"; {detail}" for detail in details)
    return (
        f"creates its capture list only under `{name}`, which requires "
        f"`{pp_group}.is_last_rank`{extra}: under PP the last stage captures only its own "
        "layers and the ids of earlier stages are lost without an error; this "
        "last-rank-gated layer-entry shape is not rewritten yet"
    )
