"""What ``generate.generate`` answers for one SGLang tree: :class:`UpstreamResult`.

The result holds every part's answer (:class:`PartAnswer`, in registry order) and the file
changes; the CLI, the texts (``output/``), the series, ``deliver/`` and ``installed/``
read it from here, and only the modules that call ``generate`` import the generator.
:func:`write_tests` writes the result's shipped tests to a folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.patchfile import FileChange, changed_paths, render_patch
from codemods.upstream.edit.runtime import holds_helpers
from codemods.upstream.facts import FAMILY, SHIPPED_TESTS, VALIDATION
from codemods.upstream.family.plan import FamilyPlan
from codemods.upstream.part import Decision, FactsKey, ModelState, T, Verdict
from codemods.upstream.sizing import packer_access
from codemods.upstream.tree.reachability import Refusal
from codemods.upstream.tree.releases import release_of
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation.relax import ValidationResult


@dataclass(frozen=True)
class PartAnswer:
    """One part's answer for the tree."""

    name: str
    decision: Decision


@dataclass
class UpstreamResult:
    tree: SGLangTree
    #: Every part's answer, in registry order.
    parts: list[PartAnswer] = field(default_factory=list)
    changes: list[FileChange] = field(default_factory=list)
    #: The folder ``generate(tests_dir=...)`` wrote ``tests`` to (None: not asked for).
    tests_dir: Path | None = None
    #: The PP refusals of the patched tree (``reachability.tree_refusals``), found once by
    #: ``generate`` after every part (None: a result made otherwise).
    refusals: list[Refusal] | None = None

    def decision(self, name: str) -> Decision | None:
        return next((a.decision for a in self.parts if a.name == name), None)

    def facts(self, key: FactsKey[T]) -> T | None:
        """The facts of the part ``key`` names (:mod:`codemods.upstream.facts`)."""
        decision = self.decision(key.part)
        return None if decision is None else key.read(decision.facts)

    def set_facts(self, key: FactsKey[T], facts: T | None) -> None:
        """Replace the facts of the part ``key`` names (an answer that applies, added if
        absent); a new list of answers, so a copy of the result keeps its own."""
        name = key.part
        key.read(facts)
        if self.decision(name) is None:
            self.parts = [*self.parts, PartAnswer(name, Decision(Verdict.APPLIES, facts=facts))]
            return
        self.parts = [
            PartAnswer(a.name, replace(a.decision, facts=facts)) if a.name == name else a
            for a in self.parts
        ]

    @property
    def models(self) -> list[ModelState]:
        """What each part that rewrites one model file found there (its file present and
        its hook defined), also where the part is left out or not asked for."""
        return [a.decision.model for a in self.parts if a.decision.model is not None]

    def model(self, name: str) -> ModelState | None:
        decision = self.decision(name)
        return None if decision is None else decision.model

    @property
    def notes(self) -> list[str]:
        return [note for answer in self.parts for note in answer.decision.notes]

    @property
    def left_out(self) -> list[PartAnswer]:
        """The parts that would apply but are not in this patch (a partial patch)."""
        return [a for a in self.parts if a.decision.verdict is Verdict.LEFT_OUT]

    @property
    def family(self) -> FamilyPlan | None:
        """The capture-hook family's plan (None: not asked for)."""
        return self.facts(FAMILY)

    @family.setter
    def family(self, plan: FamilyPlan | None) -> None:
        self.set_facts(FAMILY, plan)

    @property
    def validation(self) -> ValidationResult | None:
        """What the server-arg validation part decided (None: not run)."""
        return self.facts(VALIDATION)

    @validation.setter
    def validation(self, found: ValidationResult | None) -> None:
        self.set_facts(VALIDATION, found)

    @property
    def tests(self) -> dict[str, str]:
        """File name -> text of the CPU tests shipped for the family (in a checkout's
        patch; left out of a package tree's, see ``tests_left_out``)."""
        validation = self.validation
        relay = validation.tests if validation is not None else {}
        shipped: dict[str, str] = self.facts(SHIPPED_TESTS) or {}
        return {**shipped, **relay}

    @property
    def release(self) -> str | None:
        return release_of(self.tree)

    @property
    def tests_left_out(self) -> bool:
        """The tree has no test folder, so the patch does not carry ``tests``."""
        return bool(self.tests) and self.tree.tests is None

    @property
    def tests_note(self) -> str | None:
        """Where the shipped tests went, when not (only) into the patch."""
        if not self.tests:
            return None
        names = ", ".join(sorted(self.tests))
        if self.tests_left_out:
            where = (
                f"written to {self.tests_dir} instead"
                if self.tests_dir
                else "pass --tests-dir DIR to write them to a folder"
            )
            return (
                f"tests left out of the patch: {self.tree.describe()} has no test "
                f"folder and tests are not written into the package ({names}); "
                f"{where}"
            )
        if self.tests_dir:
            return f"tests also written to {self.tests_dir} ({names})"
        return None

    @property
    def patch(self) -> str:
        return render_patch(self.changes)

    @property
    def changed(self) -> list[str]:
        return changed_paths(self.changes)

    @property
    def glue_path(self) -> str:
        """Patch path of the module that holds the helpers (SGLang's aux-capture module)."""
        return self.tree.module_path(GLUE_MODULE)

    @property
    def holds_helpers(self) -> bool:
        """Whether the tree's aux-capture module already holds the helpers as shipped."""
        return holds_helpers(self.tree)

    @property
    def packer_path(self) -> str:
        return self.tree.module_path(packer_access.MODULE)


def write_tests(tests: dict[str, str], folder: str | Path) -> Path:
    """Write ``tests`` (file name -> text) into ``folder``; the folder."""
    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    for name, text in tests.items():
        with open(path / name, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return path
