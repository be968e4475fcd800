"""Which modules and calls the caller codemods report but never rewrite, and why.

A rewrite must not change code whose errors are wanted, nor code written for another engine:

- **Test modules**: ``test_*.py``, ``*_test.py``, ``conftest.py``, or a file under a directory
  named ``tests``.  Their hook calls test the hooks themselves (a ``ValueError`` for ``None``
  is what they check).  Rewritten only on request (``--include-tests``).
- **Calls whose error a test expects**: inside ``with pytest.raises(...)`` (or ``raises`` imported
  from pytest) or ``with self.assertRaises(...)`` / ``assertRaisesRegex(...)``, in any module,
  always left alone: swallowing the error would break the test.
- **Not SGLang**: a module that imports another inference engine (``vllm``, ``tokenspeed``, ...)
  and not ``sglang``, or that passes a hook a keyword SGLang's setters do not take (they take
  one parameter, ``layer_ids`` or ``layers_to_capture``, in every release the hook facts cover;
  ``capture_hc=`` is another engine's).  Only hooks the facts know are checked: a user-added
  hook (``--hook``) may take any keyword.

Every question is a pure function of a path, a parsed module and hook names.  A skipped call
site keeps its risks (``scan`` shows it) and gets action ``none`` and a note starting with
:data:`SKIP_PREFIX` that says why (:func:`mark_skipped`; :func:`~codemods.callers.records.is_skipped` tells).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePosixPath

import libcst as cst

from codemods.callers.fieldwalk import FieldWalker
from codemods.callers.records import SKIP_PREFIX, Action, CallSite
from codemods.catalog import hook_facts

#: Start of the note of a call site left alone on purpose.

#: The keyword names of SGLang's capture-hook setters (one parameter, 0.5.18-0.5.23).
SGLANG_KEYWORDS = frozenset({"layer_ids", "layers_to_capture"})

#: Top-level packages of other inference engines.
OTHER_ENGINES = frozenset({"vllm", "tokenspeed", "tensorrt_llm", "lmdeploy"})

_RAISES_METHODS = frozenset({"assertRaises", "assertRaisesRegex", "assertRaisesRegexp"})


# ------------------------------------------------------------------------- test modules
def is_test_path(path: str) -> bool:
    """``test_*.py``, ``*_test.py``, ``conftest.py``, or under a ``tests`` directory."""
    parts = PurePosixPath(str(path).replace("\\", "/")).parts
    if not parts:
        return False
    name = parts[-1]
    if name == "conftest.py" or (name.startswith("test_") and name.endswith(".py")):
        return True
    return name.endswith("_test.py") or "tests" in parts[:-1]


# --------------------------------------------------------------------------- imports
def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


class _Imports(FieldWalker, cst.CSTVisitor):
    def __init__(self) -> None:
        self.packages: set[str] = set()
        #: Local names bound to ``pytest.raises`` (``from pytest import raises as r``).
        self.raises_names: set[str] = set()
        #: Local names bound to the ``pytest`` module.
        self.pytest_names: set[str] = set()

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = _dotted(alias.name)
            if name is None:
                continue
            self.packages.add(name.split(".")[0])
            if name == "pytest":
                bound = alias.asname.name if alias.asname else None
                self.pytest_names.add(bound.value if isinstance(bound, cst.Name) else "pytest")

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = _dotted(node.module)
        if module is None:
            return
        self.packages.add(module.split(".")[0])
        if module == "pytest" and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if isinstance(alias.name, cst.Name) and alias.name.value == "raises":
                    bound = alias.asname.name if alias.asname else alias.name
                    if isinstance(bound, cst.Name):
                        self.raises_names.add(bound.value)


def _imports(
    module: cst.Module, statements: Sequence[cst.Import | cst.ImportFrom] | None = None
) -> _Imports:
    """What the module imports; ``statements``: its import statements when already collected
    (discovery's walk), else the module is walked."""
    visitor = _Imports()
    if statements is None:
        visitor.walk(module)
    for statement in statements or ():
        if isinstance(statement, cst.Import):
            visitor.visit_Import(statement)
        else:
            visitor.visit_ImportFrom(statement)
    return visitor


def other_engine(
    module: cst.Module, statements: Sequence[cst.Import | cst.ImportFrom] | None = None
) -> str | None:
    """Why the module targets another engine (it imports one and not ``sglang``), or None."""
    packages = _imports(module, statements).packages
    if "sglang" in packages:
        return None
    engines = sorted(packages & OTHER_ENGINES)
    if not engines:
        return None
    return f"imports {', '.join(engines)} and not sglang"


# -------------------------------------------------------------------------- keywords
def _hook_name(call: cst.Call) -> str | None:
    """``x.<hook>(...)`` or ``getattr(x, "<hook>")(...)``: the name called, else None."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if (
        isinstance(func, cst.Call)
        and isinstance(func.func, cst.Name)
        and func.func.value == "getattr"
        and len(func.args) >= 2
        and isinstance(func.args[1].value, cst.SimpleString)
    ):
        value = func.args[1].value.evaluated_value
        return value if isinstance(value, str) else None
    return None


class _Calls(FieldWalker, cst.CSTVisitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    visitor = _Calls()
    visitor.walk(node)
    return visitor.calls


def foreign_keywords(
    module: cst.Module, hook_names: Iterable[str], calls: Sequence[cst.Call] | None = None
) -> tuple[tuple[str, str], ...]:
    """``(hook, keyword)`` for each keyword passed to a hook the facts know that SGLang's
    setters do not take, in source order (``calls``: the module's calls when already
    collected)."""
    checked = {name for name in hook_names if hook_facts.is_known(name)}
    found: list[tuple[str, str]] = []
    for call in _calls(module) if calls is None else calls:
        name = _hook_name(call)
        if name not in checked:
            continue
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value not in SGLANG_KEYWORDS:
                found.append((name, arg.keyword.value))
    return tuple(found)


# ------------------------------------------------------------------------ the verdict
def module_skip_reason(
    module: cst.Module,
    path: str,
    hook_names: Iterable[str],
    *,
    include_tests: bool = False,
    analysis=None,
) -> str | None:
    """Why no call of this module may be rewritten, or None when the module is in scope
    (``analysis``: discovery's, whose import statements and calls are then used as they are
    instead of walking the module again)."""
    if not include_tests and is_test_path(path):
        return "test module (rewritten only with --include-tests)"
    statements = calls = None
    if analysis is not None:
        statements, calls = analysis.imports, analysis.calls
    engine = other_engine(module, statements)
    if engine is not None:
        return f"not SGLang: {engine}"
    keywords = foreign_keywords(module, hook_names, calls)
    if keywords:
        hook, keyword = keywords[0]
        return f"not SGLang: {hook}({keyword}=...) is not a keyword of SGLang's setters"
    return None


# ------------------------------------------------------------- calls expected to raise
def _is_raises_context(item: cst.WithItem, imports: _Imports) -> bool:
    expr = item.item
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    if isinstance(func, cst.Name):
        return func.value in imports.raises_names
    if isinstance(func, cst.Attribute):
        if func.attr.value in _RAISES_METHODS:
            return True
        return (
            func.attr.value == "raises"
            and isinstance(func.value, cst.Name)
            and func.value.value in (imports.pytest_names or {"pytest"})
        )
    return False


class _ExpectedErrors(FieldWalker, cst.CSTVisitor):
    def __init__(self, imports: _Imports) -> None:
        self.imports = imports
        self.calls: set[cst.Call] = set()

    def visit_With(self, node: cst.With) -> None:
        if any(_is_raises_context(item, self.imports) for item in node.items):
            self.calls.update(_calls(node.body))


def calls_expecting_errors(module: cst.Module) -> frozenset[cst.Call]:
    """The call nodes of ``module`` inside a ``pytest.raises`` / ``assertRaises`` block."""
    visitor = _ExpectedErrors(_imports(module))
    visitor.walk(module)
    return frozenset(visitor.calls)


EXPECTED_ERROR_REASON = "inside pytest.raises / assertRaises: the error is expected"


# ---------------------------------------------------------------------- call records
def mark_skipped(site: CallSite, reason: str) -> CallSite:
    """``site`` reported but not rewritten: action ``none``, the reason in its note."""
    return dataclasses.replace(site, actions=(Action.NONE,), note=f"{SKIP_PREFIX}{reason}")


def skip_all(sites: Sequence[CallSite], reason: str | None) -> tuple[CallSite, ...]:
    """Every site marked skipped for ``reason`` (unchanged when ``reason`` is None)."""
    if reason is None:
        return tuple(sites)
    return tuple(mark_skipped(site, reason) for site in sites)


def skip_analysis(analysis, reason: str | None):
    """``analysis`` (discovery's :class:`~codemods.callers.analyse.Analysis`) with every call marked
    skipped for ``reason`` (unchanged when ``reason`` is None)."""
    if reason is None:
        return analysis
    found = tuple(
        dataclasses.replace(item, site=mark_skipped(item.site, reason)) for item in analysis.found
    )
    return dataclasses.replace(analysis, found=found)


def _in_raises_block(
    call: cst.Call, parents: Mapping[cst.CSTNode, cst.CSTNode], imports: _Imports
) -> bool:
    """Whether ``call`` is in the body of a ``pytest.raises`` / ``assertRaises`` block (its
    ancestors, from discovery's parent map)."""
    child: cst.CSTNode = call
    parent = parents.get(child)
    while parent is not None:
        if (
            isinstance(parent, cst.With)
            and child is parent.body
            and any(_is_raises_context(item, imports) for item in parent.items)
        ):
            return True
        child, parent = parent, parents.get(parent)
    return False


def skip_expected_errors(
    found: Sequence,
    module: cst.Module,
    parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None,
    statements: Sequence[cst.Import | cst.ImportFrom] | None = None,
) -> list:
    """``found`` (discovery's ``FoundCall`` records of ``module``) with the calls inside a
    ``pytest.raises`` / ``assertRaises`` block marked skipped.  With discovery's ``parents``
    (and import ``statements``) only the found calls' ancestors are looked at; else the
    module is walked."""
    if parents is None:
        expecting = calls_expecting_errors(module)
        inside = [item.call in expecting for item in found]
    else:
        with_blocks = any(
            isinstance(node, cst.With) for item in found for node in _ancestors(item.call, parents)
        )
        imports = _imports(module, statements) if with_blocks else None
        inside = [
            imports is not None and _in_raises_block(item.call, parents, imports) for item in found
        ]
    return [
        dataclasses.replace(item, site=mark_skipped(item.site, EXPECTED_ERROR_REASON))
        if expected
        else item
        for item, expected in zip(found, inside, strict=True)
    ]


def _ancestors(node: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode]):
    parent = parents.get(node)
    while parent is not None:
        yield parent
        parent = parents.get(parent)
