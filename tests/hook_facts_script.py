"""Where ``scripts/derive_hook_facts.py`` and its fixture tree are, and the data file's facts of
one release (the analysis itself is :mod:`codemods.catalog.derive`)."""

from __future__ import annotations

from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "derive_hook_facts.py"
FIXTURE_TREE = Path(__file__).resolve().parent.parent / "fixtures" / "hook_facts" / "tree"


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
