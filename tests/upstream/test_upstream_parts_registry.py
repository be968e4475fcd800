"""The registry of parts keeps Kimi (and every part) behind one import.

A Kimi-style model is one module exposing a ``Part``, one line in ``parts.PARTS`` and its
fixtures: only the registry imports a part's package from outside it, and parts import
neither the registry nor each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

from codemods.upstream import parts
from codemods.upstream.part import Decision, Plan, Verdict

PACKAGE = Path(__file__).resolve().parents[2] / "codemods"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _modules() -> dict[str, set[str]]:
    return {
        str(path.relative_to(PACKAGE.parent)): _imports(path)
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_only_the_registry_imports_kimi_from_outside():
    importers = {
        path
        for path, names in _modules().items()
        if not path.startswith("codemods/upstream/kimi/")
        and any(name.startswith("codemods.upstream.kimi") for name in names)
    }
    assert importers == {"codemods/upstream/parts.py"}


def test_parts_import_neither_the_registry_nor_each_other():
    part_modules = {
        f"{part.decide.__module__.replace('.', '/')}.py": part.decide.__module__
        for part in parts.PARTS
    }
    assert len(set(part_modules.values())) >= 4
    modules = _modules()
    for path, dotted in part_modules.items():
        others = {m for m in part_modules.values() if m != dotted}
        names = modules[path]
        assert "codemods.upstream.parts" not in names, path
        assert not names & others, (path, names & others)


def test_every_part_answers_and_names_are_unique(tmp_path):
    names = [part.name for part in parts.PARTS]
    assert len(names) == len(set(names))
    # An empty package tree: every part looks and says why it does not apply.
    (tmp_path / "sglang" / "srt" / "models").mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (tmp_path / "sglang" / "srt" / "models" / "__init__.py").write_text("")
    from codemods.upstream.tree.sglang_tree import detect_tree

    tree = detect_tree(tmp_path)
    plan = Plan(tree, None, parts.owned_models())
    for part in parts.PARTS:
        decision = part.decide(tree, plan)
        assert isinstance(decision, Decision)
        assert decision.verdict is Verdict.NOT_APPLICABLE, (part.name, decision)
        assert decision.reason, part.name
        plan.decided[part.name] = decision
