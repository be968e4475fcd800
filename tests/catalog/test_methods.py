"""The capture-method registry: every table both sides read follows from its rows, so a new
capture method is one row of ``METHODS`` in ``codemods/catalog/hooks.py``."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from importlib import resources

import pytest
import tomllib

from codemods.callers.analyse import required
from codemods.callers.rewrite import metadata
from codemods.catalog import methods
from codemods.catalog.hooks import CATALOG, METHODS, CaptureMethod
from codemods.ppcheck import pp_aux_plan
from codemods.upstream.family import proxy_width
from codemods.upstream.kimi import linear
from codemods.upstream.kimi import part as kimi_part
from codemods.upstream.output import pr_body
from codemods.upstream.tree import reachability
from codemods.upstream.validation import relax, runtime_guard
from tests.test_installs import PROJECT_ROOT

FAKE = CaptureMethod(
    "fakecap",
    "rejected",
    title="FakeCap",
    relay_order=len(METHODS) + 1,
    admitted_with_pp=True,
)


def test_each_row_is_one_hook_of_the_catalog():
    assert [hook.name for hook in CATALOG] == [method.hook for method in METHODS]
    assert len({method.family for method in METHODS}) == len(METHODS)
    assert sorted(method.relay_order for method in methods.relayed()) == list(
        range(1, len(methods.relayed()) + 1)
    )


def test_a_new_row_shows_up_in_every_derived_table():
    rows = (*METHODS, FAKE)
    assert methods.relayed_names(rows)[-1] == "FAKECAP"
    assert methods.relay_hooks(rows)["set_fakecap_layers_to_capture"] == "FAKECAP"
    assert methods.hook_titles(rows)["set_fakecap_layers_to_capture"] == "FakeCap"
    assert methods.admitted_names(rows)[-1] == "FAKECAP"
    # Admitted, its drafter not on the EAGLE worker: the validation admits it on PD prefill.
    assert methods.admitted_on_pd_prefill(rows)[-1] == FAKE
    assert methods.admitted_on_eagle_path(rows) == methods.EAGLE_PATH
    eagle = CaptureMethod(
        "eaglecap", "rejected", relay_order=9, admitted_with_pp=True, drafts_on_eagle_worker=True
    )
    with pytest.raises(ValueError, match="exactly one"):
        methods.admitted_on_eagle_path((*METHODS, eagle))
    assert "is_fakecap" in methods.spec_checks(rows)
    assert FAKE in methods.rejecting_none(rows)
    # A row the patch does not relay is in none of the upstream tables.
    quiet = (*METHODS, CaptureMethod("quietcap", "rejected"))
    assert "QUIETCAP" not in methods.relayed_names(quiet)
    assert "set_quietcap_layers_to_capture" not in methods.relay_hooks(quiet)


def test_the_relay_order_is_the_order_of_the_declarations():
    first = CaptureMethod("firstcap", "rejected", relay_order=1)
    rows = tuple(
        CaptureMethod(m.family, m.none_meaning, relay_order=m.relay_order + 1)
        if m.relay_order
        else m
        for m in METHODS
    )
    assert methods.relayed_names((*rows, first))[0] == "FIRSTCAP"


def test_roles_held_by_one_row_must_be_held_by_exactly_one():
    two = (*METHODS, CaptureMethod("othercap", "rejected", relayed_natively=True))
    with pytest.raises(ValueError, match="exactly one"):
        methods.native_relay(two)
    with pytest.raises(ValueError, match="exactly one"):
        methods.runner_fallback((*METHODS, CaptureMethod("x", "y", falls_back_to="nocap")))


def test_the_users_of_the_tables_read_the_registry():
    assert proxy_width.HOOK_METHODS == methods.relay_hooks()
    assert runtime_guard.HOOKS == methods.relay_hooks()
    assert reachability.CAPTURE_ALGORITHMS == methods.relayed_names()
    assert pr_body.HOOK_NAMES == methods.hook_titles()
    assert required.SPEC_CHECKS == methods.spec_checks()
    assert kimi_part.HOOK == linear.SETTER == methods.NATIVE.hook
    assert reachability.DSPARK_HOOK == methods.FALLBACK.hook
    assert reachability.DFLASH_HOOK == methods.FALLBACK_TARGET.hook
    # The torch-free plan imports nothing of codemods: its default is checked here instead.
    assert pp_aux_plan.DEFAULT_FEATURE == methods.NATIVE.name


#: The modules of ``codemods/`` that may spell a capture method in code, and why.  Every other
#: module derives the names from the registry rows (``catalog/methods.py``).
SPELLING_MODULES = {
    # the registry itself
    "catalog/hooks.py",
    # SGLang files shipped verbatim: they cannot import auxcap
    "upstream/shipped/pp_aux_capture.py",
    "upstream/shipped/pp_aux_capture_family_models.py",
    "upstream/shipped/test_pp_aux_relay.py",
    # torch-free and import-free; its default is checked against the registry above
    "ppcheck/pp_aux_plan.py",
}
CODEMODS = PROJECT_ROOT / "codemods"


def _spellings(rows=METHODS) -> re.Pattern[str]:
    """A method's name or family as a word (``DSPARK``, ``dspark``; not ``is_dspark``)."""
    words = sorted({s for m in rows for s in (m.name, m.family)}, key=len, reverse=True)
    return re.compile(r"\b(?:" + "|".join(map(re.escape, words)) + r")\b")


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_in_code(source: str, rows=METHODS) -> list[tuple[int, str]]:
    """(line, text) of each string of ``source`` outside docstrings that spells a method:
    literals, f-string and template text (what is emitted into SGLang included)."""
    tree = ast.parse(source)
    docstrings, spelling = _docstrings(tree), _spellings(rows)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and spelling.search(node.value)
    ]


def spelled_in_quotes(source: str, rows=METHODS) -> list[str]:
    """A method's name or family in quotes anywhere in ``source``, docstrings and comments
    included (``"EAGLE3"``, ``'dspark'``)."""
    words = sorted({s for m in rows for s in (m.name, m.family)})
    return re.findall(r"[\"'](?:" + "|".join(map(re.escape, words)) + r")[\"']", source)


def test_the_method_spelling_check_finds_each_form():
    spelled = [
        'NAME = "DSPARK"',
        "ok = method == 'eagle3'",
        'TEMPLATE = """    check(cfg, \\"DFLASH\\")\n"""',
        'f"patched: MSD relay {x}"',
        "PATTERN = r'set_(?:eagle3|dflash)_layers'",
    ]
    for source in spelled:
        assert spelled_in_code(source), source
    quiet = [
        '"""A docstring may name DSPARK."""',
        "# so may a comment: DSPARK",
        'HOOK = "set_dspark_layers_to_capture"',
        'CHECK = "is_eagle3"',
        'ENTRY = "dspark_hidden_states"',
        'NAME = f"{NATIVE.name} relay"',
    ]
    for source in quiet:
        assert not spelled_in_code(source), source
    assert spelled_in_quotes('"""e.g. ``x == "eagle3"``"""')
    assert not spelled_in_quotes('"""DSPARK, unquoted"""')
    # A new row is a new spelling.
    assert spelled_in_code('X = "FAKECAP"', (*METHODS, FAKE))
    assert not spelled_in_code('X = "FAKECAP"')


def test_only_the_listed_modules_spell_a_method():
    spelling: dict[str, object] = {}
    for path in sorted(CODEMODS.rglob("*.py")):
        module = path.relative_to(CODEMODS).as_posix()
        source = path.read_text(encoding="utf-8")
        found = spelled_in_code(source) or spelled_in_quotes(source)
        if found:
            spelling[module] = found
    assert {m: f for m, f in spelling.items() if m not in SPELLING_MODULES} == {}
    assert len(SPELLING_MODULES) <= 5


def test_the_codemod_descriptions_name_the_methods_from_the_registry():
    raw = tomllib.loads(
        resources.files(metadata.__package__).joinpath("codemods.toml").read_text("utf-8")
    )
    for table in ("guard", "fallback"):
        for method in METHODS:
            assert method.hook not in raw[table]["description"]
        assert not [
            m.name for m in methods.rejecting_none() if m.name in raw["guard"]["description"]
        ]
    guard = metadata.load_builtin("guard").description
    rejecting = [m.name for m in methods.rejecting_none()]
    assert f"{', '.join(rejecting[:-1])} and {rejecting[-1]} capture hooks" in guard
    for method in methods.accepting_none():
        assert f"{method.name} (which accepts None)" in guard
    assert "{" not in guard and "{" not in metadata.load_builtin("fallback").description


#: Run with a registry of one more row, added as a newcomer would add it.
_PROBE = """
import importlib.util, json, sys
from pathlib import Path

import codemods.catalog

path = Path(codemods.catalog.__file__).with_name("hooks.py")
anchor = "METHODS: tuple[CaptureMethod, ...] = (\\n"
text = path.read_text(encoding="utf-8")
assert text.count(anchor) == 1
row = '    CaptureMethod("fakecap", "rejected", title="FakeCap", relay_order=9, admitted_with_pp=True),\\n'
spec = importlib.util.spec_from_loader("codemods.catalog.hooks", loader=None)
hooks = importlib.util.module_from_spec(spec)
hooks.__file__ = str(path)
sys.modules["codemods.catalog.hooks"] = hooks
exec(compile(text.replace(anchor, anchor + row), str(path), "exec"), hooks.__dict__)

from codemods.callers.analyse import required
from codemods.callers.rewrite import metadata
from codemods.upstream.family import proxy_width
from codemods.upstream.output import pr_body, result_facts, series_messages
from codemods.upstream.tree import reachability
from codemods.upstream.validation import relax, runtime_guard

hook_source = (
    "from typing import Any\\n\\n\\n" + relax._ANCHOR + "    if cfg.pp_size == 1:\\n        return\\n"
    + relax._EAGLE_CHECK + relax._EAGLE_MESSAGE + "        )\\n"
)
print(json.dumps({
    "relaxed": relax.relax(hook_source, "validation_hook.py"),
    "catalog": sorted(hooks.DEFAULT_HOOKS.names),
    "proxy_width": proxy_width.HOOK_METHODS,
    "runtime_guard": runtime_guard.HOOKS,
    "reachability": list(reachability.CAPTURE_ALGORITHMS),
    "pr_body": pr_body.HOOK_NAMES,
    "result_facts": list(result_facts.ADMITTED),
    "series_messages": list(series_messages.ADMITTED),
    "spec_checks": sorted(required.SPEC_CHECKS),
    "guard_description": metadata.load_builtin("guard").description,
}))
"""


def test_one_row_added_to_the_registry_reaches_every_table():
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    hook = "set_fakecap_layers_to_capture"
    assert hook in found["catalog"]
    assert found["proxy_width"][hook] == found["runtime_guard"][hook] == "FAKECAP"
    assert found["reachability"][-1] == "FAKECAP"
    assert found["pr_body"][hook] == "FakeCap"
    assert found["result_facts"][-1] == found["series_messages"][-1] == "FAKECAP"
    assert "is_fakecap" in found["spec_checks"]
    assert "FAKECAP" in found["guard_description"].split(" capture hooks")[0]
    # The validation change admits it on PD prefill, in its branch, message and comment.
    relaxed = found["relaxed"]
    assert f'{relax.HELPER_NAME}(cfg, "FAKECAP")' in relaxed
    assert 'cfg.speculative_algorithm.upper() == "FAKECAP"' in relaxed
    assert "or FAKECAP for " in relaxed
    assert ", FAKECAP)." in relaxed
