"""The caller fixtures: ``fixtures/callers/<case>/before.py`` and its expected outputs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codemods.callers.transform import TransformOptions

ROOT = Path(__file__).resolve().parent.parent
CALLERS = ROOT / "fixtures" / "callers"
DEMO_REPO = ROOT / "fixtures" / "demo_repo"


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path

    @property
    def before(self) -> bytes:
        return (self.folder / "before.py").read_bytes()

    @property
    def extra_hooks(self) -> tuple[str, ...]:
        options = self.folder / "options.json"
        if not options.exists():
            return ()
        return tuple(json.loads(options.read_text())["extra_hooks"])

    def options(self, policy: str = "default") -> TransformOptions:
        if policy == "raise":
            return TransformOptions(
                guard_policy="raise", fallback_policy="raise", extra_hooks=self.extra_hooks
            )
        return TransformOptions(extra_hooks=self.extra_hooks)

    def expected(self, policy: str = "default") -> bytes:
        """after_raise.py when the raise policies change the output, else after.py."""
        if policy == "raise" and (self.folder / "after_raise.py").exists():
            return (self.folder / "after_raise.py").read_bytes()
        return (self.folder / "after.py").read_bytes()

    @property
    def changes(self) -> bool:
        return self.expected() != self.before


CASES = [Case(folder.name, folder) for folder in sorted(CALLERS.iterdir()) if folder.is_dir()]
CASE_IDS = [case.name for case in CASES]
