"""Layer loops of the layer-entry forwards that enumerate a slice of the stack (qwen3_vl).

Besides ``for i in range(self.start_layer, self.end_layer)``, a 0.5.22+ decoder stack may
enumerate its own layers and pick the callback once per layer, handing it to the one
layer call that runs (two branches call the layer differently)::

        aux_hidden_states = AuxHiddenStateList()
        for layer_idx, layer in enumerate(
            self.layers[self.start_layer : self.end_layer]
        ):
            layer_idx = layer_idx + self.start_layer
            capture_output = (
                aux_hidden_states.capture
                if layer_idx in self.layers_to_capture
                else None
            )
            if self.use_hf_deepstack_order:
                hidden_states = layer(..., capture_output=capture_output)
            else:
                hidden_states = layer(..., capture_output=capture_output)

The offset may be written ``layer_idx += self.start_layer``, and the callback may be
picked in each of the two layer calls instead (qwen3_vl_moe's ``Qwen3MoeLLMModel``)::

            if self.use_hf_deepstack_order:
                hidden_states = layer(
                    ...,
                    capture_output=aux_hidden_states.capture
                    if layer_idx in self.layers_to_capture
                    else None,
                )
            else:
                hidden_states = layer(..., capture_output=<the same choice>)

Iteration ``k`` runs layer ``self.start_layer + k`` and captures its input when that id
is a capture id: the same capture points as the range loop, so the forward is rewritten
the same way (:mod:`~codemods.upstream.family.shapes.entry`).  The loop itself is the
``enumerated-slice`` form of the loop-form table
(:mod:`~codemods.upstream.family.loops.forms`); :func:`callback_problem` says whether the
callback of such a loop is picked as above and, when it is not, why.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.syntax import SELF_IDS, assignments, name_value, only_assign

#: The keyword the layers take the callback by.
CAPTURE_KEYWORD = "capture_output"


def _choice(aux_name: str, index: str) -> m.IfExp:
    """``<aux_name>.capture if <index> in self.<ids> else None``"""
    return m.IfExp(
        body=m.Attribute(value=m.Name(aux_name), attr=m.Name("capture")),
        test=m.Comparison(
            left=m.Name(index),
            comparisons=[m.ComparisonTarget(operator=m.In(), comparator=SELF_IDS)],
        ),
        orelse=m.Name("None"),
    )


def callback_uses(loop: cst.For, aux_name: str) -> int:
    """How many times an enumerated loop without a problem reads the capture ids (and
    ``<aux_name>.capture``): once where it picks the callback into a local, once per
    layer call where each call picks it."""
    assert isinstance(loop.target, cst.Tuple)  # the enumerated-slice form
    index = name_value(loop.target.elements[0].value)
    return len(findall(loop, _choice(aux_name, index)))


def callback_problem(loop: cst.For, aux_name: str) -> str | None:
    """``None`` when ``loop``, an ``enumerated-slice`` loop without a problem, captures
    into ``aux_name`` through one callback as described above; otherwise what is not so."""
    target = loop.target
    assert isinstance(target, cst.Tuple)  # the enumerated-slice form
    index = name_value(target.elements[0].value)
    statements = list(loop.body.body)
    # ``cb = aux.capture if index in self.<ids> else None``, once, at the top level.
    choice = _choice(aux_name, index)
    keyword = m.Arg(keyword=m.Name(CAPTURE_KEYWORD))
    inline = findall(loop, m.Arg(keyword=m.Name(CAPTURE_KEYWORD), value=choice))
    if inline:
        return _inline_problem(loop, aux_name, statements, inline, keyword)
    picks = [
        k
        for k, statement in enumerate(statements)
        if m.matches(
            statement,
            m.SimpleStatementLine(
                body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=choice)]
            ),
        )
    ]
    if len(picks) != 1 or len(findall(loop, choice)) != 1:
        return (
            f"the callback is not picked once as `{aux_name}.capture if {index} in "
            "self.layers_to_capture else None`"
        )
    callback = name_value(only_assign(statements[picks[0]]).targets[0].target)
    if len(assignments(loop, callback)) != 1:
        return f"`{callback}` is assigned more than once in the loop"
    handed = findall(loop, keyword)
    if not handed or any(not m.matches(arg.value, m.Name(callback)) for arg in handed):
        return f"the layers do not take `{CAPTURE_KEYWORD}={callback}`"
    # The keywords themselves are names too when the local is called like them.
    keywords = len(handed) if callback == CAPTURE_KEYWORD else 0
    if len(findall(loop, m.Name(callback))) != 1 + len(handed) + keywords:
        return f"`{callback}` is used besides the layer calls"
    if len(handed) > 1 and not _one_per_branch(statements[picks[0] + 1 :], keyword):
        return (
            f"`{CAPTURE_KEYWORD}={callback}` is handed to more than one layer call that "
            "can run in the same iteration"
        )
    if len(findall(loop, m.Attribute(value=m.Name(aux_name)))) != 1:
        return f"`{aux_name}` is used in the loop besides the callback"
    return None


def _inline_problem(
    loop: cst.For, aux_name: str, statements: list, inline: list, keyword: m.Arg
) -> str | None:
    """The callback picked in the layer calls themselves: every ``capture_output=`` of the
    loop is the choice, in one layer call or one per branch of one ``if``, and the loop
    reads the ids and ``<aux_name>`` nowhere else."""
    handed = findall(loop, keyword)
    if len(handed) != len(inline):
        return f"the layers do not all take `{CAPTURE_KEYWORD}={aux_name}.capture if ...`"
    if len(handed) > 1 and not _one_per_branch(statements[1:], keyword):
        return (
            f"`{CAPTURE_KEYWORD}` is handed to more than one layer call that can run in "
            "the same iteration"
        )
    if len(findall(loop, m.Attribute(value=m.Name(aux_name)))) != len(handed):
        return f"`{aux_name}` is used in the loop besides the callback"
    if len(findall(loop, SELF_IDS)) != len(handed):
        return "the loop reads the capture ids besides picking the callback"
    return None


def _one_per_branch(statements: Sequence[cst.CSTNode], keyword: m.Arg) -> bool:
    """The callback's keyword sits once in the body and once in the ``else`` block of
    one ``if`` (no ``elif``), and nowhere else."""
    holders = [s for s in statements if findall(s, keyword)]
    if len(holders) != 1 or not isinstance(holders[0], cst.If):
        return False
    branch: cst.If = holders[0]
    if not isinstance(branch.orelse, cst.Else):
        return False
    return (
        len(findall(branch.body, keyword)) == 1
        and len(findall(branch.orelse, keyword)) == 1
        and not findall(branch.test, keyword)
    )
