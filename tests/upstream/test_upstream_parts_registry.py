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


def test_a_patch_of_kimi_alone_says_the_sizing_is_left_out(tmp_path):
    """Kimi-Linear rewritten without the family (``--models kimi_linear``): its captures
    ride the handoff, but no sizing path gives them a CUDA-graph buffer; the answer says so."""
    import shutil

    from codemods.upstream.generate import generate

    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
    shutil.copytree(fixtures / "mini_sglang" / "sglang", tmp_path / "sglang")
    models = tmp_path / "sglang" / "srt" / "models"
    shutil.copyfile(fixtures / "kimi_renamed.py", models / "kimi_linear.py")
    shutil.copyfile(fixtures / "family_llama_like.py", models / "family_llama_like.py")
    result = generate(tmp_path, models=["kimi_linear"])
    assert result.decision("kimi_linear").applies
    sizing = result.decision("sizing")
    assert sizing.verdict is Verdict.LEFT_OUT
    assert "only kimi_linear.py" in sizing.reason and "--disable-cuda-graph" in sizing.breaks
    assert [a.name for a in result.left_out] == ["sizing"]
    family = generate(tmp_path, models=["family_llama_like"]).decision("sizing")
    assert family.verdict is not Verdict.LEFT_OUT or "only" not in family.reason
