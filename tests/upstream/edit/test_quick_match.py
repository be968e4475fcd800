"""``quick_match.matches`` answers as ``libcst.matchers.matches`` does, and answers plain
matchers without LibCST's engine."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest

from codemods.upstream.edit import quick_match
from codemods.upstream.edit.quick_match import matches, node_types

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
SOURCE = """\
class Stack(nn.Module):
    def forward(self, x, *, dim=0):
        aux = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux.append(x)
            x = layer(x)
        out, extra = self.norm(x), x.flatten(dim=dim)
        return (x, aux) if aux else torch.cat([x], dim=dim)
"""
PLAIN = [
    m.Name("self"),
    m.Name(),
    m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("norm"))),
    m.Call(func=m.Attribute(value=m.Name("torch"))),
    m.Call(args=[m.Arg(), m.DoNotCare()]),
    m.Call(args=[m.Arg(keyword=m.Name("dim"))]),
    m.Call(args=[]),
    m.Assign(targets=[m.AssignTarget(target=m.Tuple())]),
    m.Attribute(attr=m.Name("layers_to_capture")) | m.Name("aux"),
    m.Comparison(),
    m.Param(default=m.Integer("0")),
]
OTHERS = [
    m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name("dim"))]),
    m.Name(value=m.MatchRegex("au.*")),
    m.Call(func=m.SaveMatchedNode(m.Name(), "callee")),
    ~m.Name("self"),
    m.Name() | m.MatchIfTrue(lambda node: isinstance(node, cst.Integer)),
    m.TypeOf(m.Name, m.Integer)(),
    m.Param(default=None),
    m.FunctionDef(asynchronous=None),
]


def _nodes(tree: cst.CSTNode) -> list[cst.CSTNode]:
    found: list[cst.CSTNode] = []

    class Every(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            found.append(node)
            return True

    tree.visit(Every())
    return found


def _ids(matchers: list) -> list[str]:
    return [f"{k}-{type(matcher).__name__}" for k, matcher in enumerate(matchers)]


@pytest.mark.parametrize("matcher", PLAIN + OTHERS, ids=_ids(PLAIN + OTHERS))
def test_answers_as_libcst(matcher):
    nodes = _nodes(cst.parse_module(SOURCE))
    nodes += _nodes(cst.parse_module((FIXTURES / "upstream" / "family_llama_like.py").read_text()))
    answers = [matches(node, matcher) for node in nodes]
    assert answers == [m.matches(node, matcher) for node in nodes]
    assert any(answers) or matcher in (m.Call(args=[]),)


@pytest.mark.parametrize("matcher", PLAIN, ids=_ids(PLAIN))
def test_plain_matchers_skip_libcsts_engine(matcher, monkeypatch):
    nodes = _nodes(cst.parse_module(SOURCE))
    monkeypatch.setattr(quick_match.m, "matches", lambda *_: pytest.fail("LibCST asked"))
    for node in nodes:
        matches(node, matcher)


def test_node_types_of_a_matcher():
    assert node_types(m.Call(func=m.Name())) == (cst.Call,)
    assert node_types(m.Name() | m.Attribute()) == (cst.Name, cst.Attribute)
    assert node_types(m.Name() | m.MatchIfTrue(bool)) is None
    assert node_types(~m.Name()) is None
