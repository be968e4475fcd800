"""The command line of ``scripts/derive_hook_facts.py``: derive the given release trees (or
those of a wheel cache), then write the data file or, with ``--check``, compare it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from codemods.catalog.derive.datafile import DATA_FILE, RELEASES, build, dumps
from codemods.catalog.derive.index import HookFactsError

DESCRIPTION = (
    "Derive the capture-hook facts of SGLang releases from their model files (static analysis)."
)

#: ``releases -> {release: unpacked root}``: where the release trees come from without ``--tree``.
CachedTrees = Callable[[Iterable[str]], dict[str, Path]]


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str] | None = None, cached_trees: CachedTrees | None = None) -> int:
    """Exit status 0 (written, or up to date), 1 (``--check``: out of date) or 2 (a tree
    that cannot be analysed)."""
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="VERSION=ROOT",
        help="an unpacked release (the directory holding sglang/)",
    )
    parser.add_argument("--output", type=Path, default=DATA_FILE)
    parser.add_argument(
        "--check", action="store_true", help="compare with the data file instead of writing it"
    )
    args = parser.parse_args(argv)
    trees: dict[str, Path] = {}
    for item in args.tree:
        version, sep, root = item.partition("=")
        if not sep:
            parser.error(f"--tree {item!r}: expected VERSION=ROOT")
        trees[version] = Path(root)
    if not trees:
        if cached_trees is None:
            parser.error("no --tree given and no wheel cache to take the releases from")
        trees = cached_trees(RELEASES)
    try:
        text = dumps(build(trees))
    except HookFactsError as exc:
        print(f"derive_hook_facts: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(
                f"{args.output} is out of date; run scripts/derive_hook_facts.py", file=sys.stderr
            )
            return 1
        return 0
    _write_atomic(args.output, text)
    print(f"wrote {args.output} ({len(text)} bytes)")
    return 0
