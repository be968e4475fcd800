"""``scripts/derive_hook_facts.py`` imported as a module (it is a script, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "derive_hook_facts.py"
FIXTURE_TREE = Path(__file__).resolve().parent.parent / "fixtures" / "hook_facts" / "tree"


def load_script():
    name = "derive_hook_facts"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def release_view(data: dict, release: str) -> dict:
    """The data file's facts of one release, as ``derive_release`` gives them."""
    view: dict = {}
    for hook, setters in data["hooks"].items():
        for setter, variants in setters.items():
            for variant in variants:
                if release in variant["releases"]:
                    facts = {k: v for k, v in variant.items() if k != "releases"}
                    view.setdefault(hook, {})[setter] = facts
    return view
