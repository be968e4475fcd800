"""Decoder stacks whose ``forward`` hands the work to one method (deepseek_v4, SGLang
0.5.23), and captures written into packer slots.

::

    def forward(self, input_ids, positions, forward_batch, input_embeds,
                pp_proxy_tensors=None):
        if not _is_cuda:
            return self._forward_impl(
                input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors
            )
        ...
                return self._forward_impl(...)

    def _forward_impl(self, ...):
        capture_dspark = self.dspark_layers_to_capture is not None
        dspark_aux_hidden_states = (
            AuxHiddenStatePacker(len(self.dspark_layers_to_capture))
            if capture_dspark
            else None
        )
        ...
                if capture_dspark and i in self.dspark_layers_to_capture:
                    ...
                    mhc_stream_mean(
                        completed, out=dspark_aux_hidden_states.slot(completed[:, 0])
                    )
        ...
        if not self.pp_group.is_last_rank:
            return PPProxyTensors({"hidden_states": hidden_states.flatten(1)})
        ...
        if capture_dspark:
            return (hidden_states, pre_hc_head), dspark_aux_hidden_states.finalize()

The capture forward is the delegate: :func:`delegated_forwards` analyses it as the
family analyses a ``forward`` (``registry.analyse_forward``), on a view of it in which
a write into the next packer slot (``<aux>.slot(x)``) reads as the append it is
(``<aux>.append(x)``) and the packer made under the capture condition (``<aux> =
AuxHiddenStatePacker(...) if <gate> else None``) reads as ``if <gate>: <aux> =
AuxHiddenStatePacker(...)``.  Statement positions are the same in the view and in the
method, so the family's rewrite applies to the method itself; the shape records the
method's name (:class:`DelegatedForwardShape`).
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.parsing import source_text
from codemods.upstream.edit.walk import findall
from codemods.upstream.family import registry
from codemods.upstream.family.forward import ForwardShape
from codemods.upstream.family.survey import ModuleShapes
from codemods.upstream.family.syntax import SELF_IDS


@dataclasses.dataclass(frozen=True)
class DelegatedForwardShape(ForwardShape):
    """A :class:`ForwardShape` of the method ``forward`` delegates to."""

    method: str = "forward"


def method_of(shape: ForwardShape) -> str:
    """The name of the method ``shape`` describes."""
    return getattr(shape, "method", "forward")


def _delegate(forward: cst.FunctionDef) -> str | None:
    """``name`` when every ``return`` of ``forward`` returns ``self.<name>(...)`` (one name)."""
    returns = findall(forward, m.Return())
    names = {
        ret.value.func.attr.value
        for ret in returns
        if isinstance(ret.value, cst.Call)
        and isinstance(ret.value.func, cst.Attribute)
        and m.matches(ret.value, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name())))
    }
    if not returns or len(names) != 1 or any(ret.value is None for ret in returns):
        return None
    if any(
        ret.value is None
        or not m.matches(ret.value, m.Call(func=m.Attribute(value=m.Name("self"))))
        for ret in returns
    ):
        return None
    return names.pop()


class _SlotAsAppend(cst.CSTTransformer):
    """``<aux>.slot(x)`` -> ``<aux>.append(x)``; ``<aux> = P(...) if g else None`` ->
    ``if g: <aux> = P(...)`` (a top-level statement for a top-level statement)."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if m.matches(updated, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("slot")))):
            return updated.with_changes(func=updated.func.with_changes(attr=cst.Name("append")))
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        gated = m.SimpleStatementLine(
            body=[
                m.Assign(
                    targets=[m.AssignTarget(m.Name())],
                    value=m.IfExp(body=m.Call(func=m.Name()), test=m.Name(), orelse=m.Name("None")),
                )
            ]
        )
        if not m.matches(updated, gated):
            return updated
        assign = updated.body[0]
        value = assign.value
        inner = updated.with_changes(body=[assign.with_changes(value=value.body)], leading_lines=[])
        return cst.If(
            test=value.test,
            body=cst.IndentedBlock(body=[inner]),
            leading_lines=updated.leading_lines,
        )


def _line_of(module: cst.Module, class_name: str, method: str) -> int:
    in_class = False
    for number, text in enumerate(source_text(module).splitlines(), start=1):
        if text.startswith("class "):
            in_class = text[6:].startswith((class_name + "(", class_name + ":"))
        elif in_class and text.lstrip().startswith(f"def {method}("):
            return number
    return 0


def delegated_forwards(module: cst.Module, shapes: ModuleShapes) -> ModuleShapes:
    """``shapes`` plus the capture forwards of classes whose ``forward`` delegates to a
    method that reads the capture ids (and whose own ``forward`` does not)."""
    known = {shape.class_name for shape in shapes.forwards}
    added = []
    for statement in module.body:
        if not isinstance(statement, cst.ClassDef) or statement.name.value in known:
            continue
        methods = {
            node.name.value: node
            for node in statement.body.body
            if isinstance(node, cst.FunctionDef)
        }
        forward = methods.get("forward")
        name = _delegate(forward) if forward is not None else None
        target = methods.get(name) if name else None
        if not name or target is None or not findall(target, SELF_IDS):
            continue
        class_name = statement.name.value
        view = target.visit(_SlotAsAppend())
        assert isinstance(view, cst.FunctionDef)  # the view rewrites calls and lines in it
        shape = registry.analyse_forward(class_name, view, _line_of(module, class_name, name))
        fields = {f.name: getattr(shape, f.name) for f in dataclasses.fields(ForwardShape)}
        added.append(DelegatedForwardShape(**fields, method=name))
    if not added:
        return shapes
    return dataclasses.replace(shapes, forwards=(*shapes.forwards, *added))
