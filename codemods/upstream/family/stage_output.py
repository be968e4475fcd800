"""A causal-LM ``forward`` that names the decoder-stack output, then unpacks it on every
rank (mimo_v2, SGLang 0.5.22+).

::

        if self._is_multimodal:
            model_out = general_mm_embed_routine(..., language_model=self.model, ...)
        else:
            model_out = self.model(...)
        if self.capture_aux_hidden_states:
            hidden_states, hidden_states_before_norm, aux_hidden_states = model_out
        else:
            hidden_states, hidden_states_before_norm = model_out

On non-last PP ranks the stack returns ``PPProxyTensors``, which cannot be unpacked, so
the forward fails under PP with or without capture.  The fix hands the non-last stage's
``PPProxyTensors`` on right before the first unpacking, as the forward's final ``else:
return hidden_states`` meant to::

        if not self.pp_group.is_last_rank:
            return model_out
        if self.capture_aux_hidden_states:
            ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.pyformat import parse_statements
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import FamilyRewriteError
from codemods.upstream.family.repairs import StageOutputFix
from codemods.upstream.family.syntax import (
    CAPTURE_FLAG,
    NOT_LAST_RANK,
    code_of,
    name_value,
    node_ids,
)

METHOD_INDENT = 8


@dataclass(frozen=True)
class NamedStageOutputFix(StageOutputFix):
    """:class:`StageOutputFix` for a stack output bound to ``name`` first."""

    name: str = ""


def _forward(cls: cst.ClassDef) -> cst.FunctionDef | None:
    for statement in cls.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == "forward":
            return statement
    return None


def _is_stack_call(value: cst.BaseExpression, receiver: str) -> bool:
    if not isinstance(value, cst.Call):
        return False
    return code_of(value.func) == receiver or any(
        arg.keyword is not None
        and arg.keyword.value == "language_model"
        and code_of(arg.value) == receiver
        for arg in value.args
    )


def _binding_names(statement: cst.CSTNode, receiver: str) -> set[str]:
    """Names bound to the stack's output (``name = <receiver>(...)``) in ``statement``."""
    names = set()
    for assign in findall(statement, m.Assign(targets=[m.AssignTarget(m.Name())])):
        if _is_stack_call(assign.value, receiver):
            names.add(name_value(assign.targets[0].target))
    return names


def _unpacks(statement: cst.CSTNode, name: str) -> list[cst.Assign]:
    return findall(statement, m.Assign(targets=[m.AssignTarget(m.Tuple())], value=m.Name(name)))


def _guarded(body: Sequence[cst.CSTNode]) -> set[int]:
    """Node ids under ``if`` tests of the capture flag or the rank: unpacking there runs
    only where the stack returned a tuple (the hooks turn capture off on non-last
    stages)."""
    guarded: set[int] = set()
    for statement in body:
        for branch in findall(statement, m.If()):
            test = code_of(branch.test)
            if CAPTURE_FLAG in test or "is_last_rank" in test:
                guarded |= node_ids(branch.body)
    return guarded


def _first_unpack(body: Sequence[cst.CSTNode], receiver: str) -> tuple[int, str] | None:
    """(index of the top-level statement that first unpacks the named stack output on
    every rank, the name); ``None`` when there is none."""
    guarded = _guarded(body)
    bound: set[str] = set()
    for index, statement in enumerate(body):
        if (
            isinstance(statement, cst.If)
            and m.matches(statement, m.If(test=NOT_LAST_RANK))
            and m.matches(statement.body.body[-1], m.SimpleStatementLine(body=[m.Return()]))
        ):
            return None  # non-last stages leave before any later statement
        for name in sorted(bound):
            if any(id(node) not in guarded for node in _unpacks(statement, name)):
                return index, name
        bound |= _binding_names(statement, receiver)
    return None


def named_stage_unpack(cls: cst.ClassDef, receiver: str) -> tuple[str, str] | None:
    """``(name, first unpacking as source)`` when the class's ``forward`` binds the
    stack output to a name and unpacks it on every rank; else ``None``."""
    forward = _forward(cls)
    if forward is None or not isinstance(forward.body, cst.IndentedBlock):
        return None
    found = _first_unpack(list(forward.body.body), receiver)
    if found is None:
        return None
    index, name = found
    assign = _unpacks(forward.body.body[index], name)[0]
    return name, f"{code_of(assign.targets[0].target)} = {name}"


def fix_named_stage_output(fn: cst.FunctionDef, fix: NamedStageOutputFix) -> cst.FunctionDef:
    """See the module docstring."""
    if not isinstance(fn.body, cst.IndentedBlock):
        raise FamilyRewriteError(f"{fix.class_name}.forward has no block body")
    body = list(fn.body.body)
    found = _first_unpack(body, fix.receiver)
    if found is None or found[1] != fix.name:
        raise FamilyRewriteError(f"{fix.class_name}.forward unpacks no named stack output")
    index = found[0]
    pad = " " * METHOD_INDENT
    (check,) = parse_statements(
        f"{pad}if not {fix.pp_group}.is_last_rank:\n{pad}    return {fix.name}\n", pad
    )
    following = body[index]
    # a statement of the forward's block: a simple line or a compound statement
    assert isinstance(following, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
    body.insert(index, check.with_changes(leading_lines=following.leading_lines))
    body[index + 1] = following.with_changes(leading_lines=[])
    return fn.with_changes(body=fn.body.with_changes(body=body))
