"""Layer loops narrowed for two-batch overlap (glm4_moe, glm4_moe_lite, SGLang 0.5.21+).

Some decoder stacks run their layers in two parts: the loop that captures covers
``range(normal_start_layer, normal_end_layer)``, two locals that start as the stage's
layer range and are narrowed only when the batch runs with two-batch overlap; the layers
left out then run through ``model_forward_stages`` without capture::

        normal_start_layer = self.start_layer
        normal_end_layer = self.end_layer
        if forward_batch.can_run_tbo:
            ...
                normal_end_layer = self.first_k_dense_replace
            ...
        aux_hidden_states = AuxHiddenStateList()
        for i in range(normal_start_layer, normal_end_layer):
            ...

Without two-batch overlap the loop covers the stage's layers exactly, as
``range(self.start_layer, self.end_layer)`` does.  With it, the overlapped layers capture
nothing (a single-stage run loses those captures the same way); under PP the stage then
holds fewer captures than the capture layers it owns, and the gathering raises, naming
them, instead of handing on a shorter list.

This is the check of the ``narrowed-range`` entry of the loop-form table
(:mod:`~codemods.upstream.family.loops.forms`), which the layer-entry shapes ask.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.syntax import name_value

#: The batch attribute under which the range may be narrowed.
OVERLAP_FLAG = "can_run_tbo"


def _self_attr(name: str) -> m.Attribute:
    return m.Attribute(value=m.Name("self"), attr=m.Name(name))


def _assigned_names(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()
    for assign in findall(node, m.Assign()):
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                names.add(target.target.value)
    for other in findall(node, m.AugAssign() | m.AnnAssign()):
        assert isinstance(other, (cst.AugAssign, cst.AnnAssign))
        if isinstance(other.target, cst.Name):
            names.add(other.target.value)
    return names


def narrowed_range_problem(
    body: list[cst.BaseStatement], loop_index: int, loop: cst.For
) -> str | None:
    """``None`` when ``loop`` covers ``range(a, b)`` with ``a = self.start_layer`` and
    ``b = self.end_layer`` set once at the top of the forward before it and changed only
    under a ``can_run_tbo`` test; otherwise what is not so."""
    call = loop.iter
    if not isinstance(call, cst.Call) or not m.matches(
        call, m.Call(func=m.Name("range"), args=[m.Arg(m.Name()), m.Arg(m.Name())])
    ):
        return "the loop does not run over `range(<start>, <end>)`"
    names = [name_value(arg.value) for arg in call.args]
    if names[0] == names[1]:
        return "the loop's start and end are the same name"
    before = body[:loop_index]
    for name, attr in zip(names, ("start_layer", "end_layer"), strict=True):
        initial = m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(m.Name(name))], value=_self_attr(attr))]
        )
        starts = [k for k, statement in enumerate(before) if m.matches(statement, initial)]
        if len(starts) != 1:
            return f"`{name}` is not set once to `self.{attr}` before the loop"
        for k, statement in enumerate(before):
            if k == starts[0] or name not in _assigned_names(statement):
                continue
            if k < starts[0] or not (
                isinstance(statement, cst.If)
                and findall(statement.test, m.Attribute(attr=m.Name(OVERLAP_FLAG)))
            ):
                return (
                    f"`{name}` changes other than under a `{OVERLAP_FLAG}` test after "
                    f"`{name} = self.{attr}`"
                )
        if name in _assigned_names(loop.body) or any(
            name in _assigned_names(s) for s in body[loop_index + 1 :]
        ):
            return f"`{name}` changes in or after the loop"
    return None
