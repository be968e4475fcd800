"""Capture hooks without an early return whose stack is still split across PP stages.

Some causal-LM classes (gemma4_causal, qwen2_5_vl) store the capture ids on every rank:
their hooks never ``return`` early off the last rank.  The decoder stack is split across
the stages all the same, and its forward hands only ``hidden_states`` / ``residual`` on:
the captures of non-last stages are dropped, and the last stage returns fewer than a
single-stage run (or, on a non-last stage, the causal-LM forward unpacks the
``PPProxyTensors`` it got as if they held ``(hidden_states, aux_hidden_states)``).

:func:`split_stack_setters` picks such hooks: on a class whose ``forward`` takes
``pp_proxy_tensors`` and that reads ``self.pp_group``, storing the ids on a direct
submodule, with no ``return`` in the hook.  The family planning then treats them as the
early-return hooks are treated (the stack forward must be one the family rewrites), and
the hook rewrite appends the same ``set_pp_aux_capture`` call and sets the flag that
makes ``forward`` unpack the stack's output on the last stage only; there is no return
to drop.
A file whose hooks are not all patchable this way keeps its old report.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall
from codemods.upstream.family.setter import SetterShape
from codemods.upstream.family.setter import _setter_shape as setter_shape
from codemods.upstream.family.survey import ModuleShapes
from codemods.upstream.family.syntax import split_docstring

#: The PP group the rewritten hook passes to ``set_pp_aux_capture``.
PP_GROUP = "self.pp_group"


def _class(module: cst.Module, name: str) -> cst.ClassDef | None:
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value == name:
            return statement
    return None


def _method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    found = None
    for statement in cls.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
            found = statement  # the last definition is the one Python keeps
    return found


def _runs_under_pp(cls: cst.ClassDef) -> bool:
    forward = _method(cls, "forward")
    if forward is None:
        return False
    if not any(p.name.value == "pp_proxy_tensors" for p in forward.params.params):
        return False
    return bool(findall(cls, m.Attribute(value=m.Name("self"), attr=m.Name("pp_group"))))


def split_stack_setters(module: cst.Module, shapes: ModuleShapes) -> list[SetterShape]:
    """The hooks of ``shapes`` to patch although none returns early, with the PP group
    they set up the relay for; ``[]`` when any hook of the file does not qualify."""
    picked = []
    for setter in shapes.setters:
        if setter.early_return or setter.problem:
            return []
        cls = _class(module, setter.class_name)
        hook = _method(cls, setter.hook) if cls is not None else None
        if cls is None or hook is None or not _runs_under_pp(cls):
            return []
        if findall(hook, m.Return()):
            return []
        shape = _shape_without_early_return(setter, hook)
        if shape.problem or shape.receiver is None:
            return []
        picked.append(shape)
    return picked


def sibling_setters(
    module: cst.Module, shapes: ModuleShapes, early: list[SetterShape]
) -> list[SetterShape]:
    """Hooks that store their ids on every rank in a class whose other hooks return early
    (qwen3_vl's EAGLE3 hook on 0.5.18-0.5.20): without the relay they lose the earlier
    stages' captures the same way, so they get it too, with that class's PP group."""
    groups = {s.class_name: s.pp_group for s in early if s.pp_group}
    found = []
    for setter in shapes.setters:
        if setter.early_return or setter.pp_raise or setter.class_name not in groups:
            continue
        cls = _class(module, setter.class_name)
        hook = _method(cls, setter.hook) if cls is not None else None
        if hook is None or findall(hook, m.Return()):
            continue
        shape = _shape_without_early_return(setter, hook, groups[setter.class_name])
        if shape.problem is None and shape.receiver is not None:
            found.append(shape)
    return found


def _shape_without_early_return(
    setter: SetterShape, hook: cst.FunctionDef, pp_group: str = PP_GROUP
) -> SetterShape:
    """The hook's shape as the family reads early-return hooks (receiver, flags, calls,
    ids attribute), read from the hook with the usual early return put in front."""
    guard = cst.parse_statement(f"if not {pp_group}.is_last_rank:\n    return\n")
    docstring, rest = split_docstring(list(hook.body.body))
    guarded = hook.with_changes(body=hook.body.with_changes(body=[*docstring, guard, *rest]))
    shape = setter_shape(setter.class_name, guarded, setter.line)
    return dataclasses.replace(shape, early_return=False)
