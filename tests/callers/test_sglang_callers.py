"""Discovery on real SGLang sources (read from a cached release wheel at test time).

SGLang itself calls the hooks (the model runner) and forwards them (multimodal wrappers,
models delegating to their inner model).  Python's own ``ast`` serves as an independent
finder: every hook method call it sees outside a hook's own definition must be found by
auxcap, and auxcap must report nothing inside hook definitions.  The wheel's sources are
only read, never stored in the project.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest

from codemods.callers.records import Action, Status
from codemods.callers.transform import TransformOptions, transform_source
from codemods.catalog.hooks import DEFAULT_HOOKS

pytestmark = [pytest.mark.slow, pytest.mark.sglang]

SGLANG_VERSION = "0.5.21"


def _wheel() -> Path:
    """The release wheel, downloaded once into the cache (a failed download is an error)."""
    from sglang_support.env import download_wheel

    return download_wheel(SGLANG_VERSION)


def _hook_sources() -> dict[str, bytes]:
    with zipfile.ZipFile(_wheel()) as wheel:
        return {
            name: data
            for name in wheel.namelist()
            if name.endswith(".py") and b"layers_to_capture(" in (data := wheel.read(name))
        }


class _AstFinder(ast.NodeVisitor):
    """(line, hook) of ``x.<hook>(...)`` calls, split by whether a hook definition holds them."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.callers: set[tuple[int, str]] = set()
        self.inside_hooks: set[tuple[int, str]] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in DEFAULT_HOOKS.names:
            inside = bool(self.functions) and self.functions[-1] in DEFAULT_HOOKS.names
            (self.inside_hooks if inside else self.callers).add((node.lineno, func.attr))
        self.generic_visit(node)


def _selected() -> list[tuple[str, bytes, _AstFinder]]:
    """Files where ``ast`` sees callers, plus the eight smallest files that only delegate."""
    callers, delegating = [], []
    for name, data in sorted(_hook_sources().items()):
        finder = _AstFinder()
        finder.visit(ast.parse(data))
        if finder.callers:
            callers.append((name, data, finder))
        elif finder.inside_hooks:
            delegating.append((name, data, finder))
    delegating.sort(key=lambda item: len(item[1]))
    return callers + delegating[:8]


def test_auxcap_agrees_with_ast_on_real_sglang_sources():
    selected = _selected()
    delegations = rewritten = required = 0
    for name, data, finder in selected:
        result = transform_source(data, name, TransformOptions())
        assert result.status is not Status.FAILED, (name, result.error)
        found = {(site.line, hook) for site in result.call_sites for hook in site.hook.split("|")}
        assert finder.callers <= found, (name, sorted(finder.callers - found))
        assert not (finder.inside_hooks & found), name
        delegations += len(finder.inside_hooks)
        required += sum("capture required" in site.note for site in result.call_sites)
        if result.status is Status.CHANGED:
            rewritten += 1
            compile(result.rewritten, name, "exec")
            again = transform_source(result.rewritten, name, TransformOptions())
            assert again.status is Status.UNCHANGED, name
    assert delegations >= 8  # wrappers and forwarding models are really exercised
    # The model runner's calls are really found, and the server needs their capture: they
    # are reported, and no skip or swallowed error is written into SGLang's own code.
    assert required >= 1
    assert rewritten == 0


def test_model_runner_capture_setup_gets_no_fallback():
    """SGLang 0.5.23's model runner configures capture under the DFLASH flag and raises when
    the model has no hook: the server needs the capture, so nothing is skipped or swallowed."""
    from sglang_support.env import download_wheel

    name = "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py"
    with zipfile.ZipFile(download_wheel("0.5.23")) as wheel:
        source = wheel.read(name)
    result = transform_source(source, name, TransformOptions())
    assert result.status is Status.UNCHANGED, result.error
    dynamic = [site for site in result.call_sites if "eagle3" not in site.hook]
    assert len(dynamic) == 2
    for site in dynamic:
        assert site.actions == (Action.NONE,)
        assert "capture required" in site.note and "feature flag" in site.note
