"""Names, matchers and small syntax helpers that the model-family shapes share.

The capture ids' attribute (``layers_to_capture`` or a per-drafter variant), the layer
flag and keyword, ``if not <pp group>.is_last_rank`` and the last-rank test, a node's
source text, a body's docstring, the early return of a capture hook, node identities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import code_of as code_of  # re-exported: the family reads it here
from codemods.upstream.edit.walk import findall, subtree

CAPTURE_KWARG = "captured_last_layer_outputs"


LAYER_FLAG = "_is_layer_to_capture"


IDS_ATTR = "layers_to_capture"


CAPTURE_FLAG = "capture_aux_hidden_states"


#: Local the rewrite gives a gated forward's outgoing captures (``{}`` when it captured
#: nothing); a forward that already uses the name is not rewritten.
OUTGOING_LOCAL = "aux_outgoing"


#: ``<pp group>.is_last_rank`` receivers that the hooks use: ``self.pp_group``,
#: ``get_pp_group()`` and (0.5.21+) ``get_parallel().pp_group``.
_PP_GROUP = (
    m.Attribute(value=m.Name("self"), attr=m.Name("pp_group"))
    | m.Call(func=m.Name("get_pp_group"), args=[])
    | m.Attribute(value=m.Call(func=m.Name("get_parallel"), args=[]), attr=m.Name("pp_group"))
)


NOT_LAST_RANK = m.UnaryOperation(
    operator=m.Not(), expression=m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank"))
)


def is_ids_attr(name: str) -> bool:
    """``layers_to_capture`` or a per-drafter variant (``dspark_layers_to_capture``)."""
    return name.endswith(IDS_ATTR) and not name.startswith("set_")


#: ``self.layers_to_capture`` (or a per-drafter variant of the name).
SELF_IDS = m.Attribute(value=m.Name("self"), attr=m.Name(value=m.MatchIfTrue(is_ids_attr)))


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {node.name.value: node for node in cls.body.body if isinstance(node, cst.FunctionDef)}


_Node = TypeVar("_Node", bound=cst.CSTNode)


def split_docstring(body: list[_Node]) -> tuple[list[_Node], list[_Node]]:
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])):
        return body[:1], body[1:]
    return [], body


def early_return_of(fn: cst.FunctionDef) -> cst.If | None:
    """The leading ``if not <pp>.is_last_rank: return`` of a hook, if present."""
    if not isinstance(fn.body, cst.IndentedBlock):
        return None
    _, rest = split_docstring(list(fn.body.body))
    if not rest:
        return None
    first = rest[0]
    bare_return = m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Return(value=None)])])
    if isinstance(first, cst.If) and m.matches(
        first, m.If(test=NOT_LAST_RANK, body=bare_return, orelse=None)
    ):
        return first
    return None


def _inside_nested_def(fn: cst.FunctionDef, node: cst.CSTNode) -> bool:
    return any(
        id(node) in node_ids(inner) for inner in findall(fn.body, m.FunctionDef() | m.Lambda())
    )


def node_ids(container: cst.CSTNode) -> set[int]:
    """Identities of ``container`` and every node below it (one traversal)."""
    return {id(node) for node in subtree(container)}


def non_last_return_index(body: Sequence[cst.CSTNode]) -> int | None:
    """Index of the top-level ``if not <pp>.is_last_rank: ... return PPProxyTensors(..)``."""
    for index, statement in enumerate(body):
        if not isinstance(statement, cst.If) or not m.matches(statement, m.If(test=NOT_LAST_RANK)):
            continue
        if statement.body.body and m.matches(
            statement.body.body[-1],
            m.SimpleStatementLine(body=[m.Return(value=m.Call(func=m.Name("PPProxyTensors")))]),
        ):
            return index
    return None


def proxy_call_of(statement: cst.CSTNode) -> cst.Call:
    """The ``PPProxyTensors(...)`` call returned at the end of a branch
    :func:`non_last_return_index` found."""
    assert isinstance(statement, cst.If)
    last = statement.body.body[-1]
    assert isinstance(last, cst.SimpleStatementLine)
    returned = last.body[0]
    assert isinstance(returned, cst.Return) and isinstance(returned.value, cst.Call)
    return returned.value


def conjuncts_of(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``a and b and c`` chain (``[test]`` for anything else)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return conjuncts_of(test.left) + conjuncts_of(test.right)
    return [test]


LAST_RANK = m.Attribute(value=_PP_GROUP, attr=m.Name("is_last_rank"))


def returned_value(statement: cst.CSTNode) -> cst.BaseExpression:
    """``x`` of a ``return x`` line that the caller has matched as one."""
    assert isinstance(statement, cst.SimpleStatementLine)
    returned = statement.body[0]
    assert isinstance(returned, cst.Return) and returned.value is not None
    return returned.value


def only_assign(statement: cst.CSTNode) -> cst.Assign:
    """The ``Assign`` of a one-assignment line that the caller has matched as one."""
    assert isinstance(statement, cst.SimpleStatementLine)
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign)
    return assign


def name_value(node: cst.CSTNode) -> str:
    """The identifier of a node the caller has matched as an ``m.Name()``."""
    assert isinstance(node, cst.Name)
    return node.value


def attribute_of(node: cst.CSTNode) -> cst.Attribute:
    """A node the caller has matched as an ``m.Attribute()``."""
    assert isinstance(node, cst.Attribute)
    return node


def start_offset(name: str) -> m.SimpleStatementLine:
    """``<name> = <name> + self.start_layer`` or ``<name> += self.start_layer``: the first
    statement of a loop that enumerates the stage's slice of the layers."""
    start = m.Attribute(value=m.Name("self"), attr=m.Name("start_layer"))
    return m.SimpleStatementLine(
        body=[
            m.Assign(
                targets=[m.AssignTarget(m.Name(name))],
                value=m.BinaryOperation(left=m.Name(name), operator=m.Add(), right=start),
            )
            | m.AugAssign(target=m.Name(name), operator=m.AddAssign(), value=start)
        ]
    )


def assignments(node: cst.CSTNode, name: str) -> list[cst.Assign | cst.AugAssign]:
    """The assignments to the name ``name`` in ``node`` (plain and augmented)."""
    found: list[cst.Assign | cst.AugAssign] = [
        assign
        for assign in findall(node, m.Assign())
        if any(m.matches(t.target, m.Name(name)) for t in assign.targets)
    ]
    return found + findall(node, m.AugAssign(target=m.Name(name)))


def class_node(module: cst.Module, name: str) -> cst.ClassDef | None:
    """The top-level class ``name`` of ``module`` (the first of that name)."""
    for statement in module.body:
        if isinstance(statement, cst.ClassDef) and statement.name.value == name:
            return statement
    return None
