"""The package's modules import each other one way: no module reaches itself through its
imports, counting imports inside functions and the packages' ``__init__`` modules that an
import runs (the files shipped into SGLang, ``upstream/shipped``, are not the package's)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = "codemods.upstream.shipped"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package)."""
    modules = {}
    for path in sorted((ROOT / "codemods").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts.pop()
        modules[".".join(parts)] = (path, package)
    return modules


def _left_out(name: str) -> bool:
    return name == LEFT_OUT or name.startswith(LEFT_OUT + ".")


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        if _left_out(name):
            continue
        own_package = name if package else name.rpartition(".")[0]
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _imported(node, own_package):
                # Importing a module runs its packages' __init__ first (but not the importer's).
                found = resolve(target)
                while found:
                    if found != name and not name.startswith(found + ".") and not _left_out(found):
                        edges.add(found)
                    found = found.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_a_cycle_is_found():
    """The check above can fail: two modules that import each other are one component."""
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": set(), "d": {"a"}}
    assert cycles(graph) == [["a", "b"]]


def test_the_graph_holds_imports_inside_functions_and_packages():
    graph = import_graph()
    # Imported inside a function only.
    assert "codemods.callers.rewrite.split" in graph["codemods.callers.rewrite.callsite_codemod"]
    # ``from codemods.ppcheck.command import ...`` runs ``codemods/ppcheck/__init__`` first.
    assert {"codemods.ppcheck", "codemods.ppcheck.command"} <= graph["codemods.cli.commands"]
