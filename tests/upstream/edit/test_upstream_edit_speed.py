"""The pieces that make generation fast give what the slow way gives: ``findall`` as
LibCST's ``matchers.findall``, ``module_code`` as ``Module.code``, ``forked_map`` as ``map``,
``parse_text`` one tree per text."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest

from codemods.upstream.edit.forked import forked_map
from codemods.upstream.edit.parsing import parse_once, parse_text, source_text
from codemods.upstream.edit.splice import module_code
from codemods.upstream.edit.walk import code_of, findall, subtree
from codemods.upstream.family.plan import plan_family
from tests.upstream.edit.test_quick_match import OTHERS, PLAIN

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
MODEL_FILES = sorted((FIXTURES / "upstream").rglob("*.py"))
MATCHERS = [
    m.Call(),
    m.Name("self"),
    m.For(),
    m.If(),
    m.Attribute(value=m.Name("self")),
    m.Call() | m.Name(),
    m.Arg(keyword=m.Name()),
    m.SimpleStatementLine(),
    m.Comparison(),
    m.EmptyLine(),
    m.FunctionDef(),
    m.Param(),
    m.Return(),
    m.Assign(value=m.Call()) | m.If(),
    m.IndentedBlock(),
    m.MatchIfTrue(lambda node: isinstance(node, cst.Return)),
]


#: What the quick matcher decides itself, and what it hands to LibCST.
MATCHERS += PLAIN + OTHERS


def _same(found: list, expected: list) -> bool:
    return len(found) == len(expected) and all(a is b for a, b in zip(found, expected, strict=True))


def _libcst_findall(tree, nodes: list, matcher) -> list:
    """``m.findall(tree, matcher)`` given LibCST's pre-order walk of ``tree`` (``nodes``):
    the nodes ``m.matches`` takes, in walk order, so one walk serves every matcher
    (``m.matches`` takes no ``MatchIfTrue``: those walk the tree again)."""
    if isinstance(matcher, m.MatchIfTrue):
        return m.findall(tree, matcher)
    return [node for node in nodes if m.matches(node, matcher)]


@pytest.mark.parametrize("path", MODEL_FILES[:40], ids=lambda p: p.name)
def test_findall_gives_libcst_nodes_in_libcst_order(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    classes = [node for node in module.body if isinstance(node, cst.ClassDef)]
    every = m.MatchIfTrue(lambda node: True)
    walks = [(module, m.findall(module, every))]
    for cls in classes:  # subtrees of an indexed tree, and trees of their own
        walks += [(fn, m.findall(fn, every)) for fn in m.findall(cls, m.FunctionDef())]
    for tree, nodes in walks:
        assert _same(subtree(tree), nodes)
        for matcher in MATCHERS:
            assert _same(findall(tree, matcher), _libcst_findall(tree, nodes, matcher)), matcher
    # The one walk is LibCST's own findall, for a matcher of each kind.
    for matcher in (m.Call(), m.Name("self") | m.Return(), m.Arg(keyword=m.Name())):
        assert _same(_libcst_findall(module, walks[0][1], matcher), m.findall(module, matcher))


def test_code_of_reads_dotted_names_and_generates_the_rest():
    module = cst.parse_module("a.b.c\n( a ).b\na . b\nf(x)\n")
    texts = [code_of(line.body[0].value) for line in module.body]
    assert texts == ["a.b.c", "( a ).b", "a . b", "f(x)"]


class _Rename(cst.CSTTransformer):
    """Renames one method and adds an import: a change in a class and at module level."""

    def on_visit(self, node):
        return isinstance(node, (cst.Module, cst.ClassDef, cst.IndentedBlock))

    def leave_FunctionDef(self, original, updated):
        if original.name.value == "forward":
            return updated.with_changes(name=cst.Name("forward_renamed"))
        return updated

    def leave_Module(self, original, updated):
        added = cst.parse_statement("import added_module\n")
        return updated.with_changes(body=[added, *updated.body])


@pytest.mark.parametrize("path", MODEL_FILES[:40], ids=lambda p: p.name)
def test_module_code_is_the_code_of_the_rewritten_module(path):
    text = path.read_text(encoding="utf-8")
    with parse_once():
        module = parse_text(text)
        assert parse_text(text) is module and source_text(module) == text
        updated = module.visit(_Rename())
        assert module_code(module, updated) == updated.code
    # Outside a parse_once block the text is unknown: the code is generated.
    assert module_code(module, updated) == updated.code


def _generated(
    monkeypatch, text: str, transformer: cst.CSTTransformer, kind: type
) -> tuple[str, list[str]]:
    """``module_code`` of the rewrite (checked against ``updated.code``), and the names of
    the ``kind`` nodes (classes or functions) whose code it generated."""
    generated: list[str] = []
    original_code = kind._codegen_impl

    def counting(self, state, *args, **kwargs):
        generated.append(self.name.value)
        return original_code(self, state, *args, **kwargs)

    with parse_once():
        module = parse_text(text)
        updated = module.visit(transformer)
        with monkeypatch.context() as patched:
            patched.setattr(kind, "_codegen_impl", counting)
            result = module_code(module, updated)
    assert result == updated.code
    return result, generated


def test_module_code_splices_only_what_changed(monkeypatch):
    text = "import os\n\n\nclass A:\n    x = 1\n\n    def forward(self):\n        return 1\n"
    result, classes = _generated(monkeypatch, text, _Rename(), cst.ClassDef)
    assert "import added_module" in result and "forward_renamed" in result
    assert "A" not in classes


class _Deeper(cst.CSTTransformer):
    """Changes statements deep inside methods: ``return x`` -> ``return (x)``, and a
    ``pass`` added after every ``for`` body's first statement.  As the family's
    transformer does, it walks only what holds statements, so every other node stays the
    object it was."""

    def on_visit(self, node):
        return isinstance(node, (cst.Module, cst.IndentedBlock, cst.BaseCompoundStatement))

    def leave_SimpleStatementLine(self, original, updated):
        if m.matches(updated, m.SimpleStatementLine(body=[m.Return(value=m.Name())])):
            ret = updated.body[0]
            value = ret.value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return updated.with_changes(body=[ret.with_changes(value=value)])
        return updated

    def leave_For(self, original, updated):
        if isinstance(updated.body, cst.IndentedBlock):
            body = list(updated.body.body)
            body.insert(1, cst.SimpleStatementLine([cst.Pass()]))
            return updated.with_changes(body=updated.body.with_changes(body=body))
        return updated


@pytest.mark.parametrize("path", MODEL_FILES[:40], ids=lambda p: p.name)
def test_module_code_of_changes_deep_in_methods(path):
    text = path.read_text(encoding="utf-8")
    with parse_once():
        module = parse_text(text)
        updated = module.visit(_Deeper())
        assert module_code(module, updated) == updated.code


CLASSES = (
    "class A:\n    x = 1\n\n    def forward(self, xs):\n        y = 0\n"
    "        for x in xs:\n            y += x\n        y *= 2\n        return y\n"
    "\n\nclass B:\n    def forward(self):\n        return {}\n"
)


def test_module_code_generates_only_the_changed_statements_of_a_method(monkeypatch):
    result, generated = _generated(monkeypatch, CLASSES.format("z"), _Deeper(), cst.FunctionDef)
    assert "return (y)" in result and result.count("pass") == 1 and "return (z)" in result
    assert generated == []


def test_module_code_replaces_a_method_whole_where_a_change_is_ambiguous(monkeypatch):
    # ``return y`` also ends B.forward: A.forward's change is placed by its whole text.
    result, generated = _generated(monkeypatch, CLASSES.format("y"), _Deeper(), cst.FunctionDef)
    assert result.count("return (y)") == 2
    assert generated == ["forward", "forward"]  # A.forward, old and new


def _square_or_fail(item: int) -> int:
    if item < 0:
        raise ValueError(f"negative: {item}")
    return item * item


def test_forked_map_keeps_order_and_reports_the_child_error(monkeypatch):
    items = list(range(9))
    assert forked_map(_square_or_fail, items, weight=lambda k: 10 - k) == [k * k for k in items]
    with pytest.raises((RuntimeError, ValueError), match="negative: -"):
        forked_map(_square_or_fail, [1, -2, 3, -4])
    monkeypatch.setenv("AUXCAP_JOBS", "1")
    pid = os.getpid()
    assert forked_map(lambda _: os.getpid(), [1, 2, 3]) == [pid, pid, pid]


def test_forked_map_uses_a_second_process():
    pids = forked_map(lambda _: os.getpid(), [1, 2, 3, 4])
    assert len(set(pids)) == 2 and os.getpid() in pids


def test_plan_rewrites_in_two_processes_as_in_one(monkeypatch, tmp_path):
    for path in (FIXTURES / "upstream").glob("family_*.py"):
        shutil.copy(path, tmp_path / path.name)
    with parse_once():
        two = plan_family(tmp_path).rewritten()
    monkeypatch.setenv("AUXCAP_JOBS", "1")
    one = plan_family(tmp_path).rewritten()
    assert two == one and len(one) >= 2
