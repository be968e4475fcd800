"""The non-last-rank handoff of the layer-entry forwards, and its rewrite.

The handoff is a top-level ``if not <pp>.is_last_rank:`` whose block ends in
``return residual_batch.to_pp(...)`` (or builds its tensors from ``to_pp(...).tensors``
and returns ``PPProxyTensors(name)``, or returns a name bound to ``to_pp(...)``).  The
block may also return early under a condition of its own (glm5_next, SGLang 0.5.21,
hands a model with hyper-connections on as a bare ``PPProxyTensors``)::

        if not self.pp_group.is_last_rank:
            if self.config.mhc:
                return PPProxyTensors({"hidden_states": hidden_states})
            return residual_batch.to_pp(hidden_states, forward_batch)

Every return of the block hands a stage's output on, so :func:`wrap_handoff_returns`
wraps each of them in the same ``pp_aux_handoff(self, <handoff>, <aux>, <proxy>)``::

        if not self.pp_group.is_last_rank:
            if self.config.mhc:
                return pp_aux_handoff(
                    self,
                    PPProxyTensors({"hidden_states": hidden_states}),
                    aux_hidden_states,
                    pp_proxy_tensors,
                )
            return pp_aux_handoff(
                self,
                residual_batch.to_pp(hidden_states, forward_batch),
                aux_hidden_states,
                pp_proxy_tensors,
            )

:func:`handoff_index` finds the handoff; :func:`handoff_returns_problem` says why a
block's returns cannot all be wrapped (a return nested deeper than one ``if``, or one in
an ``else``), ``None`` when they can.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import HANDOFF
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.layer_entry.packer import returned_handoff
from codemods.upstream.family.syntax import NOT_LAST_RANK, code_of, name_value, returned_value

#: ``return residual_batch.to_pp(...)``: the handoff of these forwards.
HANDOFF_FUNC = "to_pp"
#: ``ForwardShape.proxy_arg`` of a forward that hands off this way, and how reports
#: name that handoff.
PROXY_ARG = "to_pp"
PROXY_TEXT = "residual_batch.to_pp(...)"
INDENT = 4


def _handoff_return() -> m.BaseMatcherNode:
    return m.SimpleStatementLine(
        body=[m.Return(value=m.Call(func=m.Attribute(attr=m.Name(HANDOFF_FUNC))))]
    )


def handoff_index(body: Sequence[cst.CSTNode]) -> int | None:
    """Index of the top-level ``if not <pp>.is_last_rank: ... return X.to_pp(...)`` (or
    ``proxy = X.to_pp(...)`` ... ``return proxy``)."""
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.If) or not m.matches(statement, m.If(test=NOT_LAST_RANK)):
            continue
        block = list(statement.body.body)
        if block and (
            m.matches(block[-1], _handoff_return())
            or _built_handoff(block)
            or returned_handoff(block, HANDOFF_FUNC)
        ):
            return index
    return None


def _built_handoff(block: Sequence[cst.CSTNode]) -> bool:
    """``name = residual_batch.to_pp(...).tensors`` once in the block, which then
    adds entries and ends with ``return PPProxyTensors(name)`` (gemma4_causal)."""
    last = block[-1]
    if not m.matches(
        last,
        m.SimpleStatementLine(
            body=[m.Return(value=m.Call(func=m.Name("PPProxyTensors"), args=[m.Arg(m.Name())]))]
        ),
    ):
        return False
    returned = returned_value(last)
    assert isinstance(returned, cst.Call)
    name = name_value(returned.args[0].value)
    built = m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name(name))],
                value=m.Attribute(
                    value=m.Call(func=m.Attribute(attr=m.Name(HANDOFF_FUNC))),
                    attr=m.Name("tensors"),
                ),
            )
        ]
    )
    return sum(1 for statement in block if m.matches(statement, built)) == 1


_RETURN_LINE = m.SimpleStatementLine(body=[m.Return(value=m.DoNotCare())])


def _early_returns(block: Sequence[cst.CSTNode]) -> list[int]:
    """Indexes of the block's top-level ``if`` statements (no ``else``) that end in a
    ``return <value>``."""
    return [
        index
        for index, statement in enumerate(block[:-1])
        if isinstance(statement, cst.If)
        and statement.orelse is None
        and statement.body.body
        and m.matches(statement.body.body[-1], _RETURN_LINE)
    ]


def handoff_returns_problem(handoff: cst.If) -> str | None:
    """Why not every return of the handoff block can be wrapped; ``None`` when each is
    the block's last statement or the last statement of a top-level ``if`` in it."""
    block = list(handoff.body.body)
    reachable = 1 + len(_early_returns(block))
    found = len(findall(handoff.body, m.Return()))
    if findall(handoff.body, m.FunctionDef() | m.Lambda()):
        return "the non-last-rank branch defines a function"
    if found != reachable:
        return (
            "the non-last-rank branch returns other than at its end or at the end of a "
            "top-level `if` in it"
        )
    return None


def _wrapped(
    statement: cst.CSTNode, pad: str, aux_name: str, proxy_param: str
) -> cst.BaseStatement:
    assert isinstance(statement, cst.SimpleStatementLine)
    call = Call(HANDOFF, ("self", code_of(returned_value(statement)), aux_name, proxy_param))
    (new,) = parse_statements(lines_to_text(render_call(pad, "return ", call)), pad)
    return new.with_changes(leading_lines=statement.leading_lines)


def wrap_handoff_returns(handoff: cst.If, indent: int, aux_name: str, proxy_param: str) -> cst.If:
    """``handoff`` with each of its returns wrapped in ``pp_aux_handoff``; ``indent`` is
    the column of the block's statements."""
    block = list(handoff.body.body)
    pad = " " * indent
    for index in _early_returns(block):
        inner_if = block[index]
        assert isinstance(inner_if, cst.If)
        inner = list(inner_if.body.body)
        inner[-1] = _wrapped(inner[-1], pad + " " * INDENT, aux_name, proxy_param)
        block[index] = inner_if.with_changes(body=inner_if.body.with_changes(body=inner))
    block[-1] = _wrapped(block[-1], pad, aux_name, proxy_param)
    return handoff.with_changes(body=handoff.body.with_changes(body=block))
