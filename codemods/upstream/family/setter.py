"""Recognise a model family's capture hook (setter): ``set_<x>_layers_to_capture`` on the
causal-LM class that starts with ``if not <pp group>.is_last_rank: return`` and then stores
the capture ids on a submodule (``self.model.layers_to_capture = ...`` or
``self.model.set_<x>_layers_to_capture(...)``).  Read-only; a shape it does not recognise
carries the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.catalog.hooks import HOOK_NAME_PATTERN
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.syntax import (
    IDS_ATTR,
    _inside_nested_def,
    attribute_of,
    code_of,
    early_return_of,
    is_ids_attr,
)


@dataclass(frozen=True)
class SetterShape:
    """One capture hook defined on a class."""

    class_name: str
    hook: str
    line: int
    early_return: bool
    #: ``self.pp_group`` or ``get_pp_group()``, from the early return.
    pp_group: str | None = None
    #: Source of the submodule that receives the ids (``self.model``).
    receiver: str | None = None
    #: ``self.<flag> = True`` attributes the hook sets.
    flags: tuple[str, ...] = ()
    #: Hook methods it calls on the receiver (``self.model.set_x_layers_to_capture``).
    receiver_calls: tuple[str, ...] = ()
    #: The receiver attribute that holds the ids (``layers_to_capture`` unless the hook
    #: stores them under another name, e.g. ``dspark_layers_to_capture``).
    ids_attr: str = IDS_ATTR
    #: Source of the annotation of the hook's ids parameter (``List[int]``), if any.
    ids_annotation: str | None = None
    #: Why the hook cannot be rewritten; ``None`` when it can.
    problem: str | None = None
    #: ``if <more than one PP stage>: raise ...`` at the top of the hook (beam): the
    #: hook refuses PP itself, before it stores any capture id.
    pp_raise: str | None = None
    #: The width of the captures the rewritten hook passes (``self.config.hidden_size``),
    #: from the class's ``__init__`` (``proxy_width.hook_width``); set by the plan.
    hidden_size: str | None = None


#: Tests that hold only with more than one PP stage.
_MULTI_STAGE = re.compile(r"\b(pp_size|world_size)\s*(!=\s*1|>\s*1)$")


def pp_raise_of(fn: cst.FunctionDef) -> str | None:
    """``if <pp>.world_size != 1: raise <exc>`` (or ``> 1``, or ``pp_size``) among the
    hook's top-level statements, before it stores capture ids: its source on one line."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return None
    for statement in fn.body.body:
        if findall(statement, m.AssignTarget(target=_IDS_TARGET)):
            return None
        if not isinstance(statement, cst.If) or statement.orelse is not None:
            continue
        test = " ".join(code_of(statement.test).split())
        body = statement.body.body
        if (
            _MULTI_STAGE.search(test)
            and len(body) == 1
            and m.matches(body[0], m.SimpleStatementLine(body=[m.Raise(exc=m.Call())]))
        ):
            line = body[0]
            assert isinstance(line, cst.SimpleStatementLine)
            raised = line.body[0]
            assert isinstance(raised, cst.Raise) and raised.exc is not None
            return f"if {test}: raise {code_of(raised.exc)}"
    return None


def _setter_shape(class_name: str, fn: cst.FunctionDef, line: int) -> SetterShape:
    hook = fn.name.value
    early = early_return_of(fn)
    if early is None:
        return SetterShape(class_name, hook, line, early_return=False, pp_raise=pp_raise_of(fn))
    test = early.test
    assert isinstance(test, cst.UnaryOperation)  # early_return_of: ``if not <pp>.is_last_rank``
    pp_group = code_of(attribute_of(test.expression).value)
    receivers = _receivers(fn)
    flags = tuple(
        attribute_of(assign.targets[0].target).attr.value
        for assign in findall(
            fn,
            m.Assign(
                targets=[m.AssignTarget(target=m.Attribute(value=m.Name("self")))],
                value=m.Name("True"),
            ),
        )
    )
    problem = None
    returns = [node for node in findall(fn.body, m.Return()) if not _inside_nested_def(fn, node)]
    if len(returns) > 1:
        problem = "hook returns before its end in more than one place"
    elif not receivers:
        problem = "hook does not store the capture ids on a submodule"
    elif len(receivers) > 1:
        problem = f"hook stores capture ids on several submodules ({', '.join(receivers)})"
    elif findall(fn, m.Yield()):
        problem = "hook is a generator"
    receiver = receivers[0] if len(receivers) == 1 else None
    ids_attrs = _ids_attrs(fn)
    if problem is None and len(ids_attrs) > 1:
        problem = f"hook stores capture ids under several names ({', '.join(ids_attrs)})"
    calls = tuple(
        dict.fromkeys(
            attribute_of(call.func).attr.value
            for call in findall(fn, m.Call(func=m.Attribute(attr=m.Name())))
            if receiver is not None
            and code_of(attribute_of(call.func).value) == receiver
            and HOOK_NAME_PATTERN.match(attribute_of(call.func).attr.value)
        )
    )
    return SetterShape(
        class_name,
        hook,
        line,
        early_return=True,
        pp_group=pp_group,
        receiver=receiver,
        flags=tuple(dict.fromkeys(flags)),
        receiver_calls=calls,
        ids_attr=ids_attrs[0] if len(ids_attrs) == 1 else IDS_ATTR,
        ids_annotation=_ids_annotation(fn),
        problem=problem,
    )


def _ids_annotation(fn: cst.FunctionDef) -> str | None:
    params = fn.params.params
    if len(params) < 2 or params[1].annotation is None:
        return None
    return code_of(params[1].annotation.annotation)


_IDS_TARGET = m.Attribute(attr=m.Name(value=m.MatchIfTrue(is_ids_attr)))


def _ids_attrs(fn: cst.FunctionDef) -> list[str]:
    """Names of the ids attributes a hook assigns (``self.model.<name> = ...``)."""
    return list(
        dict.fromkeys(
            attribute_of(target.target).attr.value
            for target in findall(fn, m.AssignTarget(target=_IDS_TARGET))
        )
    )


def _receivers(fn: cst.FunctionDef) -> list[str]:
    found: list[str] = []
    for target in findall(fn, m.AssignTarget(target=_IDS_TARGET)):
        found.append(code_of(attribute_of(target.target).value))
    for call in findall(
        fn,
        m.Call(
            func=m.Attribute(
                attr=m.Name(value=m.MatchIfTrue(lambda v: bool(HOOK_NAME_PATTERN.match(v))))
            )
        ),
    ):
        found.append(code_of(attribute_of(call.func).value))
    return [receiver for receiver in dict.fromkeys(found) if receiver != "self"]
