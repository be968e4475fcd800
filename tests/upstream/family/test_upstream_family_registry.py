"""The forward-shape registry: one entry per shape module, every capture kind described,
and no module but the registry importing the shapes."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import libcst as cst

from codemods.upstream.family import registry

ROOT = Path(__file__).resolve().parents[3]
SHAPES_DIR = ROOT / "codemods" / "upstream" / "family" / "shapes"
SHAPES_PACKAGE = "codemods.upstream.family.shapes"
REGISTRY = ROOT / "codemods" / "upstream" / "family" / "registry.py"


def test_registry_lists_each_shape_module_exactly_once():
    names = sorted(p.stem for p in SHAPES_DIR.glob("*.py") if p.stem != "__init__")
    for name in names:
        module = importlib.import_module(f"{SHAPES_PACKAGE}.{name}")
        assert sum(shape is module.SHAPE for shape in registry.SHAPES) == 1, name
    assert len(registry.SHAPES) == len(names)
    assert len({shape.name for shape in registry.SHAPES}) == len(names)


def test_the_shape_that_claims_every_forward_comes_last():
    plain = cst.parse_statement("def forward(self, x):\n    return x\n")
    assert registry.SHAPES[-1].claims(plain)
    assert not any(shape.claims(plain) for shape in registry.SHAPES[:-1])


def test_every_capture_kind_has_one_owner_a_description_and_a_cell():
    kinds = [kind for shape in registry.SHAPES for kind in shape.kinds]
    assert kinds
    assert len({kind.name for kind in kinds}) == len(kinds)
    for kind in kinds:
        assert kind.description and registry.describe(kind.name) == kind.description
        assert kind.cell and registry.cell(kind.name) == kind.cell


def test_every_shape_names_its_glue_and_the_handoffs_it_records():
    for shape in registry.SHAPES:
        assert shape.glue, shape.name
        for proxy_arg, text in shape.handoffs.items():
            assert registry.handoff(proxy_arg) == text


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` names in ``path``, function-level ones included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_only_the_registry_imports_the_shape_modules():
    importers = [
        path.relative_to(ROOT)
        for folder in ("codemods", "scripts", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != REGISTRY
        and not path.is_relative_to(SHAPES_DIR)
        and any(
            name == SHAPES_PACKAGE or name.startswith(SHAPES_PACKAGE + ".")
            for name in _imported_modules(path)
        )
    ]
    assert importers == []


def test_shape_modules_do_not_import_each_other():
    for path in SHAPES_DIR.glob("*.py"):
        names = _imported_modules(path)
        assert not any(name.startswith(SHAPES_PACKAGE) for name in names), path.name
