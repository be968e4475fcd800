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
from dataclasses import replace
from pathlib import Path

from codemods.upstream.edit.parsing import parse_once
from codemods.upstream.part import Plan, Verdict
from codemods.upstream.parts import PARTS, owned_models
from codemods.upstream.result import PartAnswer, UpstreamResult, write_tests
from codemods.upstream.tree.reachability import tree_refusals
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
    result.refusals = tree_refusals(tree, {c.path: c.new for c in result.changes})
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
