"""Build the upstream patch for one SGLang tree: a loop over the parts of ``parts.PARTS``.

``generate(root, models)`` detects the tree (``tree/sglang_tree.py``) and asks every part,
in the registry's order, what it does with the tree (``part.Decision``: applies with its
changes and notes, not applicable and why, left out and what that leaves broken, or cannot
apply).  The result holds every answer (``UpstreamResult.parts``); the CLI, the texts, the
series and ``auxcap sglang`` read them, never a part's module.

The changes are the parts' in registry order, one per path: a later change of a path an
earlier part changed builds on it (``Plan.text``) and takes its place, keeping its
position, series group and role (the helpers in ``<package>/srt/layers/aux_hidden_states.py``,
which every model part adds next to its model files, and the packer accessor the packer part
adds to the same module).  The result's ``patch`` is the git-style patch text
(``edit/patchfile.py``), empty when the tree already carries it.

A part that applies but cannot be completed stops the run (:class:`CannotApply`, naming the
release and the file); a tree with no model file of any part is an error too
(:class:`MissingModelFile`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.parsing import parse_once
from codemods.upstream.edit.patchfile import FileChange, changed_paths, render_patch
from codemods.upstream.edit.runtime import holds_helpers
from codemods.upstream.part import Decision, ModelState, Plan, Verdict
from codemods.upstream.parts import PARTS, owned_models
from codemods.upstream.sizing import packer_access
from codemods.upstream.tree.releases import release_of
from codemods.upstream.tree.sglang_tree import SGLangTree, detect_tree

#: ``progress(phase, done, total)``: before each part decides (phase ``part <name>``,
#: parts done of all), and as a part works through files (the family: model files planned,
#: then rewritten).
Progress = Callable[[str, int, int], None]


class CannotApply(ValueError):
    """A part that applies to the tree cannot be completed; names the release and file."""

    def __init__(self, part: str, file: str, reason: str, release: str | None) -> None:
        self.part, self.file, self.reason, self.release = part, file, reason, release
        where = f"SGLang {release}" if release else "this SGLang tree"
        super().__init__(f"{file}: {reason} ({where}; part {part})")


class MissingModelFile(FileNotFoundError):
    """The tree has no model file any part rewrites."""


@dataclass(frozen=True)
class PartAnswer:
    """One part's answer for the tree."""

    name: str
    decision: Decision


def _part_facts(name: str, doc: str) -> Any:
    """An ``UpstreamResult`` property that reads and replaces part ``name``'s facts."""
    return property(
        lambda result: result.facts(name),
        lambda result, facts: result.set_facts(name, facts),
        doc=doc,
    )


@dataclass
class UpstreamResult:
    tree: SGLangTree
    #: Every part's answer, in registry order.
    parts: list[PartAnswer] = field(default_factory=list)
    changes: list[FileChange] = field(default_factory=list)
    #: The folder ``generate(tests_dir=...)`` wrote ``tests`` to (None: not asked for).
    tests_dir: Path | None = None

    def decision(self, name: str) -> Decision | None:
        return next((a.decision for a in self.parts if a.name == name), None)

    def facts(self, name: str) -> Any:
        decision = self.decision(name)
        return None if decision is None else decision.facts

    def set_facts(self, name: str, facts: Any) -> None:
        """Replace the facts of part ``name`` (an answer that applies, added if absent); a
        new list of answers, so a copy of the result keeps its own."""
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

    family = _part_facts("family", "The capture-hook family's plan (None: not asked for).")
    validation = _part_facts(
        "validation", "What the server-arg validation part decided (None: not run)."
    )

    @property
    def tests(self) -> dict[str, str]:
        """File name -> text of the CPU tests shipped for the family (in a checkout's
        patch; left out of a package tree's, see ``tests_left_out``)."""
        validation = self.validation
        relay = validation.tests if validation is not None else {}
        return {**(self.facts("shipped_tests") or {}), **relay}

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


def generate(
    root: str | Path,
    models: list[str] | None = None,
    tests_dir: str | Path | None = None,
    progress: Progress | None = None,
) -> UpstreamResult:
    """Raises ``TreeError``, :class:`CannotApply`, :class:`MissingModelFile` or
    ``ValueError`` (a name in ``models`` that has no capture hook in the tree).

    ``models`` (file stems, e.g. ``["llama", "kimi_linear"]``) restricts the patch; by
    default it covers every model file a part rewrites.  The family's CPU tests go into a
    checkout's patch (``test/registered/unit/models/``); a package tree's patch leaves
    them out (a note says so).  ``tests_dir``: also write them to that folder (created if
    needed), whatever the tree.
    """
    with parse_once():
        return _generate(detect_tree(root), models, tests_dir, progress)


def _generate(
    tree: SGLangTree,
    models: list[str] | None,
    tests_dir: str | Path | None,
    progress: Progress | None,
) -> UpstreamResult:
    wanted = None if models is None else list(dict.fromkeys(models))
    plan = Plan(tree, wanted, owned_models(), progress=progress)
    result = UpstreamResult(tree)
    present: dict[str, int] = {}
    try:
        for index, part in enumerate(PARTS):
            plan.report(f"part {part.name}", index, len(PARTS))
            decision = part.decide(tree, plan)
            if decision.verdict is Verdict.CANNOT_APPLY:
                raise CannotApply(part.name, decision.file or "", decision.reason, release_of(tree))
            plan.decided[part.name] = decision
            result.parts.append(PartAnswer(part.name, decision))
            for change in decision.changes:
                if change.path not in present:
                    present[change.path] = len(result.changes)
                    result.changes.append(change)
                    continue
                first = result.changes[present[change.path]]
                result.changes[present[change.path]] = replace(first, new=change.new)
    finally:
        # The parts are done with the parsed trees (the family plan holds them).
        for decision in plan.decided.values():
            release_trees = getattr(decision.facts, "release_trees", None)
            if callable(release_trees):
                release_trees()
    if all(a.decision.verdict is Verdict.NOT_APPLICABLE for a in result.parts):
        raise MissingModelFile(_nothing_to_rewrite(tree, result))
    if tests_dir is not None and result.tests:
        result.tests_dir = write_tests(result.tests, tests_dir)
    return result


#: The parts that rewrite model files (the others follow what these rewrite).
MODEL_PARTS = frozenset({"family"} | {part.name for part in PARTS if part.models})
_HOOK_DEFINITION = re.compile(rb"\bdef\s+set_\w+_layers_to_capture\b")


def _nothing_to_rewrite(tree: SGLangTree, result: UpstreamResult) -> str:
    """One sentence for a tree in which no model part applies: no model file defines a
    capture hook, or why the model parts rewrite none of those that do."""
    models = tree.file(tree.module_path("sglang.srt.models.__init__")).parent
    hooked = any(
        _HOOK_DEFINITION.search(path.read_bytes()) for path in sorted(models.rglob("*.py"))
    )
    if not hooked:
        return f"{models}: no model file defines a capture hook, so there is nothing to patch"
    reasons = dict.fromkeys(a.decision.reason for a in result.parts if a.name in MODEL_PARTS)
    return f"{models}: auxcap rewrites none of the model files with a capture hook ({'; '.join(reasons)})"


def write_tests(tests: dict[str, str], folder: str | Path) -> Path:
    """Write ``tests`` (file name -> text) into ``folder``; the folder."""
    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    for name, text in tests.items():
        with open(path / name, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return path
