"""Discovery's own walk over the tree collects exactly what a LibCST visit of the same
collector collects: the same scopes, bindings and calls, and the same parent for every node
that is not layout."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from codemods.callers.analyse.scopes import _LAYOUT_NODES, _ScopeCollector

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "fixtures").rglob("*.py"))


def _summary(collector: _ScopeCollector) -> dict:
    scopes = {}
    for node, scope in collector.scopes.items():
        scopes[id(node)] = (
            sorted(scope.names),
            {name: [id(v) for v in values] for name, values in scope.values.items()},
            {name: id(param) for name, param in scope.params.items()},
            {name: id(value) for name, value in scope.annotations.items()},
            {name: [id(v) for v in values] for name, values in scope.loops.items()},
            {
                name: [(id(value), id(owner.node)) for value, owner in values]
                for name, values in scope.attributes.items()
            },
            {name: id(value) for name, value in scope.attribute_annotations.items()},
            id(scope.parent.node) if scope.parent else None,
        )
    return {"scopes": scopes, "calls": sorted(id(call) for call in collector.calls)}


def test_there_are_fixtures():
    assert len(FILES) > 50


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_walk_collects_what_a_visit_collects(path):
    try:
        module = cst.parse_module(path.read_bytes())
    except cst.ParserSyntaxError:
        pytest.skip("not Python that LibCST parses (a bad-input fixture)")
    visited = _ScopeCollector(module)
    module.visit(visited)
    walked = _ScopeCollector(module)
    walked.walk(module)
    assert _summary(walked) == _summary(visited)
    for node, parent in visited.parents.items():
        if type(node) not in _LAYOUT_NODES:
            assert walked.parents.get(node) is parent
