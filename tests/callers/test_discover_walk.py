"""Discovery's own walk over the tree collects exactly what a LibCST visit of the same
collector collects: the same scopes, bindings and calls, and the same parent for every node
that is not layout."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from codemods.callers import scope
from codemods.callers.analyse import analyse
from codemods.callers.analyse.scopes import _LAYOUT_NODES, _ScopeCollector
from codemods.callers.options import TransformOptions

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "fixtures").rglob("*.py"))


def _summary(collector: _ScopeCollector) -> dict:
    scopes = {}
    for node, found in collector.scopes.items():
        scopes[id(node)] = (
            sorted(found.names),
            {name: [id(v) for v in values] for name, values in found.values.items()},
            {name: id(param) for name, param in found.params.items()},
            {name: id(value) for name, value in found.annotations.items()},
            {name: [id(v) for v in values] for name, values in found.loops.items()},
            {
                name: [(id(value), id(owner.node)) for value, owner in values]
                for name, values in found.attributes.items()
            },
            {name: id(value) for name, value in found.attribute_annotations.items()},
            id(found.parent.node) if found.parent else None,
        )
    return {
        "scopes": scopes,
        "calls": sorted(id(call) for call in collector.calls),
        "imports": [id(statement) for statement in collector.imports],
        "capture_reads": sorted(id(read) for read in collector.capture_reads),
    }


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


#: Modules where the module-level verdicts have something to find.
SCOPE_CASES = {
    "raises_alias.py": (
        "from pytest import raises as expect\n"
        "def t(model, ids):\n"
        "    with expect(ValueError):\n"
        "        model.set_dspark_layers_to_capture(ids)\n"
        "    model.set_dflash_layers_to_capture(ids)\n"
    ),
    "nested_with.py": (
        "import pytest as pt\n"
        "def t(model, ids):\n"
        "    with open('x') as f, pt.raises(ValueError):\n"
        "        def inner():\n"
        "            model.set_dspark_layers_to_capture(ids)\n"
        "        inner()\n"
        "    with pt.raises(ValueError, match=model.set_dflash_layers_to_capture(ids)):\n"
        "        pass\n"
    ),
    "engine.py": (
        "def f(model, ids):\n    import vllm\n    model.set_dspark_layers_to_capture(ids)\n"
    ),
    "keywords.py": "def f(model, ids):\n    model.set_dspark_layers_to_capture(ids, stage=1)\n",
}


def _cases():
    yield from ((path.name, path.read_bytes()) for path in FILES)
    yield from ((name, text.encode()) for name, text in SCOPE_CASES.items())


@pytest.mark.parametrize(
    "name,source", list(_cases()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_scope_verdicts_from_the_analysis_equal_those_of_a_module_walk(name, source):
    """``module_skip_reason`` and ``skip_expected_errors`` read discovery's imports, calls and
    parents instead of walking the module; they must decide exactly as a walk does."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        pytest.skip("not Python that LibCST parses (a bad-input fixture)")
    hooks = TransformOptions().hooks
    analysis = analyse(module, name, hooks)
    walked = scope.module_skip_reason(module, name, hooks.names, include_tests=True)
    read = scope.module_skip_reason(
        module, name, hooks.names, include_tests=True, analysis=analysis
    )
    assert read == walked
    found = list(analysis.found)
    by_walk = scope.skip_expected_errors(found, module)
    by_parents = scope.skip_expected_errors(found, module, analysis.parents, analysis.imports)
    assert [item.site for item in by_parents] == [item.site for item in by_walk]


def test_the_scope_cases_exercise_every_verdict():
    verdicts = {}
    for name, text in SCOPE_CASES.items():
        module = cst.parse_module(text)
        analysis = analyse(module, name)
        reason = scope.module_skip_reason(
            module, name, TransformOptions().hooks.names, analysis=analysis
        )
        skipped = [
            item.site.line
            for item in scope.skip_expected_errors(
                list(analysis.found), module, analysis.parents, analysis.imports
            )
            if item.site.note.endswith(scope.EXPECTED_ERROR_REASON)
        ]
        verdicts[name] = (reason, skipped)
    assert verdicts["raises_alias.py"] == (None, [4])
    assert verdicts["nested_with.py"] == (None, [5])
    assert verdicts["engine.py"][0] == "not SGLang: imports vllm and not sglang"
    assert "stage=" in verdicts["keywords.py"][0]
