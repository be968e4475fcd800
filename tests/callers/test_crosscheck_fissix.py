"""Cross-check discovery against an independent parser: fissix (the lib2to3 fork Bowler uses).

On every fixture file fissix can parse, a Bowler-style method selector
``power< any* trailer< '.' name=NAME > trailer< '(' [any] ')' > any* >`` finds the method
calls of hook names; auxcap must find every one of them, except the categories auxcap
excludes on purpose: hook calls inside a hook's own definition (delegation), and mock
attribute access.  (Hook
definitions and mock attribute access such as ``m.set_x.assert_called_once_with()`` never
match the selector: the hook name is not followed by a call.)  Files fissix cannot parse,
such as ``match`` statements, are skipped, never failed.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from caller_cases import CASES, DEMO_REPO
from fissix import pygram, pytree
from fissix.patcomp import PatternCompiler
from fissix.pgen2 import driver
from fissix.pgen2.parse import ParseError
from fissix.pgen2.tokenize import TokenError

from codemods.callers.analyse import find_call_sites
from codemods.catalog.hooks import HookSet

SELECTOR = "power< any* trailer< '.' name=NAME > trailer< '(' [any] ')' > any* >"


def _files() -> list[tuple[Path, HookSet]]:
    files = []
    for case in CASES:
        hooks = case.options().hooks
        for name in ("before.py", "after.py", "after_raise.py"):
            if (case.folder / name).exists():
                files.append((case.folder / name, hooks))
    files.extend((path, HookSet()) for path in sorted(DEMO_REPO.rglob("*.py")))
    return files


FILES = _files()
_DRIVER = driver.Driver(pygram.python_grammar_no_print_and_exec_statement, convert=pytree.convert)
_PATTERN = PatternCompiler().compile_pattern(SELECTOR)


def _enclosing_function(node: pytree.Base) -> str | None:
    current = node.parent
    while current is not None:
        if current.type == pygram.python_symbols.funcdef:
            return current.children[1].value
        current = current.parent
    return None


def _builds_an_expected_mock_call(node: pytree.Node) -> bool:
    """``mock.call.model.set_x([1])``: an expected call inside a mock assertion."""
    names = [leaf.value for leaf in node.leaves() if leaf.type == pygram.token.NAME][:3]
    return (
        names[:1] == ["call"]
        or names[:2] == ["mock", "call"]
        or names
        == [
            "unittest",
            "mock",
            "call",
        ]
    )


def fissix_sites(source: str, hooks: HookSet) -> tuple[set[tuple[int, str]], int]:
    """(line, hook) of every selector match, and how many were excluded on purpose."""
    tree = _DRIVER.parse_string(source)
    found, excluded = set(), 0
    for node in tree.pre_order():
        captured: dict = {}
        if not _PATTERN.match(node, captured):
            continue
        name = captured["name"].value
        if name not in hooks.names:
            continue
        if _enclosing_function(node) in hooks.names or _builds_an_expected_mock_call(node):
            excluded += 1
            continue
        found.add((node.get_lineno(), name))
    return found, excluded


def auxcap_sites(source: str, hooks: HookSet) -> set[tuple[int, str]]:
    sites = find_call_sites(cst.parse_module(source), "x.py", hooks)
    return {(site.line, name) for site in sites for name in site.hook.split("|")}


def _parse_or_none(path: Path, hooks: HookSet):
    try:
        return fissix_sites(path.read_text(), hooks)
    except (ParseError, TokenError):
        return None


RESULTS = {path: _parse_or_none(path, hooks) for path, hooks in FILES}


@pytest.mark.parametrize(
    "path, hooks", FILES, ids=[str(p.relative_to(p.parents[1])) for p, _ in FILES]
)
def test_auxcap_finds_every_call_fissix_finds(path, hooks):
    result = RESULTS[path]
    if result is None:
        pytest.skip(f"fissix cannot parse {path.name} (Python 3.10+ syntax)")
    expected, _ = result
    missing = expected - auxcap_sites(path.read_text(), hooks)
    assert not missing, f"auxcap missed {sorted(missing)} in {path}"


def test_most_files_are_checked_and_match_files_are_skipped():
    skipped = [path for path, result in RESULTS.items() if result is None]
    checked = [path for path, result in RESULTS.items() if result is not None]
    assert any(path.parent.name == "match_statement" for path in skipped)
    assert all("match " in path.read_text() for path in skipped)
    assert len(checked) >= 0.9 * len(RESULTS)
    total = sum(len(result[0]) for result in RESULTS.values() if result is not None)
    assert total >= 40  # the cross-check covers a real number of call sites


def test_mock_call_builders_are_excluded_on_both_sides():
    mocks = next(p for p in RESULTS if p.parent.name == "mock_assertions")
    found, excluded = RESULTS[mocks]
    assert found == set() and excluded == 2
    assert auxcap_sites(mocks.read_text(), HookSet()) == set()


def test_delegation_is_excluded_and_it_happens():
    wrapper = next(p for p in RESULTS if p.parent.name == "delegating_wrapper")
    found, excluded = RESULTS[wrapper]
    assert found == set() and excluded == 3
    assert auxcap_sites(wrapper.read_text(), HookSet()) == set()


def test_auxcap_finds_more_shapes_than_the_method_selector():
    """getattr, variables, dict lookups and loops are invisible to the selector."""
    source = (
        "def f(model, ids, method):\n"
        "    getattr(model, 'set_dspark_layers_to_capture')(ids)\n"
        "    setter = getattr(model, 'set_dflash_layers_to_capture', None)\n"
        "    setter(ids)\n"
    )
    fissix_found, _ = fissix_sites(source, HookSet())
    assert fissix_found == set()
    assert auxcap_sites(source, HookSet()) == {
        (2, "set_dspark_layers_to_capture"),
        (4, "set_dflash_layers_to_capture"),
    }
