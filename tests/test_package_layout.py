"""The package stays a house a newcomer can find their way in: no folder holds more than
15 modules directly, no module is longer than 600 lines.  The files shipped into SGLang
byte for byte (``upstream/shipped``) are SGLang's, not the package's modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "codemods"
SHIPPED = ROOT / "upstream" / "shipped"
MAX_MODULES = 15
MAX_LINES = 600


def _package_modules() -> list[Path]:
    return [path for path in sorted(ROOT.rglob("*.py")) if SHIPPED not in path.parents]


def test_no_folder_holds_more_than_15_modules():
    folders: dict[Path, int] = {}
    for path in _package_modules():
        folders[path.parent] = folders.get(path.parent, 0) + 1
    crowded = {str(f.relative_to(ROOT)): n for f, n in folders.items() if n > MAX_MODULES}
    assert folders and crowded == {}


def test_no_module_is_longer_than_600_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in _package_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_click_is_imported_in_cli_only():
    """The library raises and returns; only ``codemods/cli`` talks to the terminal."""
    outside = []
    for path in _package_modules():
        if ROOT / "cli" in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(name == "click" or name.startswith("click.") for name in names):
                outside.append(str(path.relative_to(ROOT)))
    assert _package_modules() and outside == []
