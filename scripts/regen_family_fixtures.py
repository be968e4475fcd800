"""Regenerate fixtures/upstream/family_expected/ from the family_*.py inputs.

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

from codemods.upstream.family import plan_family  # noqa: E402

FIXTURES = ROOT / "fixtures" / "upstream"
EXPECTED = FIXTURES / "family_expected"


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        models = Path(scratch)
        for path in FIXTURES.glob("family_*.py"):
            shutil.copy(path, models / path.name)
        rewritten = plan_family(models).rewritten()
    EXPECTED.mkdir(exist_ok=True)
    for stale in EXPECTED.glob("*.py"):
        stale.unlink()
    for name, text in sorted(rewritten.items()):
        (EXPECTED / name).write_text(text, encoding="utf-8")
        print(f"wrote {EXPECTED.relative_to(ROOT) / name}")


if __name__ == "__main__":
    main()
