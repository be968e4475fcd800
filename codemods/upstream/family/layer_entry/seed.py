"""A stage's ``AuxHiddenStatePacker``, filled with the earlier stages' captures first.

A decoder stack that packs its captures (deepseek_v2, mimo_v2; deepseek_v4 on 0.5.23)
makes one ``AuxHiddenStatePacker`` sized by every capture id: ``K`` slots of one
``[tokens, K * hidden]`` buffer (allocated at the first capture), filled in order, whose
``finalize()`` raises unless all ``K`` were taken.  The earlier stages' captures come
first, so the rewrite rebinds the packer to what ``pp_aux_seed`` returns right after it is
made::

        aux_hidden_states = AuxHiddenStatePacker(len(self.layers_to_capture))
        aux_hidden_states = pp_aux_seed(self, aux_hidden_states, pp_proxy_tensors)
        for i in range(self.start_layer, self.end_layer):
            ...

Each received capture is copied once, into its final slot; the layers then add the
stage's own.  On the last stage the packer is the one made (in the CUDA-graph runner's
buffer where ``for_batch`` gave one), a capture of the stage output stays last, and
``finalize()`` returns the packed tensor a single-stage run returns; nothing is gathered
after the layers.  A non-last stage gets a new packer sized for the captures it hands on
(what it received, then its own), whose buffer ``pp_aux_outgoing`` sends as it is.

A packer made under the forward's capture condition (``aux = AuxHiddenStatePacker(...) if
<gate> else None``, which :mod:`~codemods.upstream.family.delegated` reads as ``if <gate>:
aux = ...``) is seeded the same way (``pp_aux_seed`` leaves ``None`` alone).  A forward
that makes a packer more than once, below its top level, or under another condition is
not recognised: there the received captures could not be put first.
"""

from __future__ import annotations

from dataclasses import replace

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.names import SEED
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.edit.walk import findall
from codemods.upstream.family.forward import FamilyRewriteError, ForwardShape
from codemods.upstream.family.syntax import code_of

PACKER_CLASS = "AuxHiddenStatePacker"
#: ``AuxHiddenStatePacker(...)`` or ``AuxHiddenStatePacker.for_batch(...)``.
PACKER_CALL = m.Call(
    func=m.Name(PACKER_CLASS) | m.Attribute(value=m.Name(PACKER_CLASS), attr=m.Name("for_batch"))
)
#: Indentation of a method body (black, 4 spaces).
METHOD_INDENT = 8


def _bound(name: str, value: m.BaseExpression) -> m.SimpleStatementLine:
    """``name = <value>`` or ``name: T = <value>``, alone on its line."""
    return m.SimpleStatementLine(
        body=[
            m.Assign(targets=[m.AssignTarget(m.Name(name))], value=value)
            | m.AnnAssign(target=m.Name(name), value=value)
        ]
    )


def packer_creation(body: list[cst.BaseStatement], aux_name: str) -> tuple[int, str | None] | None:
    """``(index, condition)`` of the top-level statement that makes ``aux_name`` a packer:
    ``aux = AuxHiddenStatePacker(...)`` (no condition), ``aux = (AuxHiddenStatePacker(...)
    if <condition> else None)`` or ``if <condition>: aux = AuxHiddenStatePacker(...)``;
    ``None`` when there is none."""
    plain = _bound(aux_name, PACKER_CALL)
    conditional = _bound(aux_name, m.IfExp(body=PACKER_CALL, orelse=m.Name("None")))
    in_if = m.If(body=m.IndentedBlock(body=[plain]), orelse=None)
    for index, statement in enumerate(body):
        if m.matches(statement, plain):
            return index, None
        if m.matches(statement, conditional):
            (found,) = findall(statement, m.IfExp())
            assert isinstance(found, cst.IfExp)  # matched above
            return index, code_of(found.test)
        if m.matches(statement, in_if):
            assert isinstance(statement, cst.If)  # matched above
            return index, code_of(statement.test)
    return None


def _same(condition: str, gate: str) -> bool:
    return " ".join(condition.split()) == " ".join(gate.split())


def with_seed(shape: ForwardShape, fn: cst.FunctionDef) -> ForwardShape:
    """``shape`` with ``seed_after`` set where the forward packs its captures into an
    ``AuxHiddenStatePacker`` it makes once, at its top level (or with the reason it is not
    recognised where it makes one otherwise); ``shape`` as it is for a list."""
    if not shape.recognised or shape.aux_name is None or not findall(fn, PACKER_CALL):
        return shape
    found = None
    if isinstance(fn.body, cst.IndentedBlock) and len(findall(fn, PACKER_CALL)) == 1:
        found = packer_creation(list(fn.body.body), shape.aux_name)
    if found is None:
        return replace(
            shape,
            problem=f"`{shape.aux_name}` is not an `{PACKER_CLASS}` made once, at the top "
            "of the forward, where the last stage can put the earlier stages' captures "
            "first",
        )
    index, condition = found
    if shape.gate is not None and (condition is None or not _same(condition, shape.gate)):
        return replace(
            shape,
            problem=f"the `{PACKER_CLASS}` is not made under the condition the captures "
            f"are taken under (`{shape.gate}`)",
        )
    return replace(shape, seed_after=index)


def insert_seed(body: list[cst.BaseStatement], shape: ForwardShape) -> None:
    """Insert ``aux = pp_aux_seed(self, aux, pp_proxy_tensors)`` right after the statement
    that makes the packer (``shape.seed_after``): a non-last stage gets a packer sized
    for the captures it hands on."""
    at = shape.seed_after
    if (
        at is None
        or shape.aux_name is None
        or at >= len(body)
        or packer_creation(body[at : at + 1], shape.aux_name) is None
    ):
        raise FamilyRewriteError(f"{shape.class_name}.forward makes no packer to seed")
    pad = " " * METHOD_INDENT
    call = Call(SEED, ("self", shape.aux_name, str(shape.proxy_param)))
    prefix = f"{shape.aux_name} = "
    (statement,) = parse_statements(lines_to_text(render_call(pad, prefix, call)), pad)
    body.insert(at + 1, statement)
