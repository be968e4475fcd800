"""Regenerate the expected outputs of the family rewriter's fixtures:
``fixtures/upstream/family_expected/`` (from ``family_*.py``), ``entry_expected/`` (from
``entry/``) and ``packer_expected/`` (from ``packer/``).

Run after an intended change of the family rewriter, then review the diff:
    python scripts/regen_family_fixtures.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codemods.upstream.family.plan import plan_family  # noqa: E402

FIXTURES = ROOT / "fixtures" / "upstream"
#: (input files, folder of their expected rewrites)
SETS = (
    (sorted(FIXTURES.glob("family_*.py")), FIXTURES / "family_expected"),
    (sorted((FIXTURES / "entry").glob("*.py")), FIXTURES / "entry_expected"),
    (sorted((FIXTURES / "packer").glob("*.py")), FIXTURES / "packer_expected"),
)


def regenerate(inputs: list[Path], expected: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        models = Path(scratch)
        for path in inputs:
            shutil.copy(path, models / path.name)
        rewritten = plan_family(models).rewritten()
    expected.mkdir(exist_ok=True)
    for stale in expected.glob("*.py"):
        stale.unlink()
    for name, text in sorted(rewritten.items()):
        (expected / name).write_text(text, encoding="utf-8")
        print(f"wrote {expected.relative_to(ROOT) / name}")


def main() -> None:
    for inputs, expected in SETS:
        regenerate(inputs, expected)


if __name__ == "__main__":
    main()
