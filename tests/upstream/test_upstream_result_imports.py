"""The result has a module of its own: the texts read ``UpstreamResult`` from
``codemods.upstream.result``, and only a module that calls ``generate(...)`` imports the
generator (``codemods.upstream.generate``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = "codemods.upstream.generate"


def _generator_importers(
    root: Path, generator: str = GENERATOR
) -> dict[str, tuple[set[str], bool]]:
    """Module path -> (the names it imports from ``generator``, whether it calls a
    ``generate``), for every module under ``root/codemods`` that imports ``generator``."""
    found: dict[str, tuple[set[str], bool]] = {}
    own = f"{generator.replace('.', '/')}.py"
    for path in sorted((root / "codemods").rglob("*.py")):
        name = str(path.relative_to(root))
        if name == own:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), name)
        names: set[str] = set()
        imported = False
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == generator:
                imported = True
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import) and any(a.name == generator for a in node.names):
                imported = True
        if not imported:
            continue
        calls = any(
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Name) and node.func.id == "generate")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "generate")
            )
            for node in ast.walk(tree)
        )
        found[name] = (names, calls)
    return found


def test_only_modules_that_call_generate_import_the_generator():
    importers = _generator_importers(ROOT)
    assert "codemods/upstream/output/release_table.py" in importers
    for path, (names, calls) in importers.items():
        assert calls, f"{path} imports {GENERATOR} but never calls generate(...)"
        assert not names & {"UpstreamResult", "PartAnswer", "write_tests"}, (path, names)


def test_text_modules_read_the_result_from_its_own_module():
    text_modules = [
        *sorted((ROOT / "codemods" / "upstream" / "output").glob("*.py")),
        *sorted((ROOT / "codemods" / "cli").glob("*.py")),
    ]
    readers = [
        path for path in text_modules if "UpstreamResult" in path.read_text(encoding="utf-8")
    ]
    assert len(readers) >= 6
    for path in readers:
        text = path.read_text(encoding="utf-8")
        assert "from codemods.upstream.result import UpstreamResult" in text, path


def test_a_module_that_imports_the_generator_for_its_result_is_found(tmp_path):
    """The check above can fail: a text module importing the result from the generator."""
    package = tmp_path / "codemods" / "upstream"
    (package / "output").mkdir(parents=True)
    (package / "generate.py").write_text("def generate(root): ...\n")
    (package / "output" / "text.py").write_text(
        "from codemods.upstream.generate import UpstreamResult\n"
    )
    (package / "output" / "table.py").write_text(
        "from codemods.upstream.generate import generate\n\nrows = generate('.')\n"
    )
    found = _generator_importers(tmp_path)
    assert found == {
        "codemods/upstream/output/table.py": ({"generate"}, True),
        "codemods/upstream/output/text.py": ({"UpstreamResult"}, False),
    }
