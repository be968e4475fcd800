#!/usr/bin/env python3
"""Derive the capture-hook facts of SGLang releases from their model files (static analysis).

The analysis is :mod:`codemods.catalog.derive` (its docstring says what it derives and how);
this script runs it on this checkout, with the release trees of the wheel cache of
``tests/sglang_support/env.py`` unless they are given with ``--tree``.

Usage::

    python scripts/derive_hook_facts.py                 # derive all releases, write the JSON
    python scripts/derive_hook_facts.py --check         # exit 1 if the JSON is out of date
    python scripts/derive_hook_facts.py --tree 0.5.23=/path/to/unpacked/root ...

Only the standard library is used.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _cached_trees(releases: Iterable[str]) -> dict[str, Path]:
    sys.path.insert(0, str(PROJECT_ROOT / "tests"))
    from sglang_support.env import sglang_tree

    return {release: sglang_tree(release) for release in releases}


def _main() -> int:
    sys.path.insert(0, str(PROJECT_ROOT))  # this checkout's codemods, installed or not
    from codemods.catalog.derive.cli import main

    return main(cached_trees=_cached_trees)


if __name__ == "__main__":
    raise SystemExit(_main())
