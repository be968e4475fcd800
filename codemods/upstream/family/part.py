"""The capture-hook family and the CPU tests it ships, as parts of the patch.

* ``family``: every model file with a capture hook that no other part owns
  (``plan.FamilyPlan``: patched or not, and why, per file), its rewritten files and the
  helpers module they call.  Not applicable on a tree with no such file, or when
  ``--models`` names none; its facts are the plan.
* ``shipped_tests``: the family test and the init test (``validation/shipped_tests.py``); in a
  checkout's patch, left out of a package tree's (its facts, file name -> text, still feed
  ``--tests-dir`` and ``--validate``); their shared utilities are a module of the package
  (``sglang/test/``), in the patch of either layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from codemods.upstream import facts as part_facts
from codemods.upstream import part
from codemods.upstream.edit.change_kinds import TESTS, Role, model_group
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.edit.runtime import runtime_change
from codemods.upstream.family.plan import FamilyPlan, plan_family
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.tree.test_variants import tree_features
from codemods.upstream.validation.shipped_tests import (
    KIMI_CASES,
    TEST_ROLES,
    TEST_UTILS_MODULE,
    render_test_utils,
    shipped_tests,
)


def models_dir(tree: SGLangTree) -> Path:
    return tree.file(tree.module_path("sglang.srt.models.__init__")).parent


def plan_for_tree(
    tree: SGLangTree,
    models: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FamilyPlan:
    """The family plan of ``tree``; ``models`` (file stems) restricts it, and a name
    without a capture hook in the tree is an error (``ValueError``).  ``progress(done,
    total)``: before each model file with a capture hook."""
    return plan_family(models_dir(tree), only=models, progress=progress).select(models)


def model_changes(tree: SGLangTree, plan: FamilyPlan) -> list[FileChange]:
    """The rewritten model files and the helpers module (none when nothing is rewritten)."""
    rewritten = plan.rewritten()
    if not rewritten:
        return []
    changes = []
    for file, text in sorted(rewritten.items()):
        stem = file.removesuffix(".py")
        path = tree.module_path(f"sglang.srt.models.{stem}")
        changes.append(FileChange(path, tree.read_text(path), text, model_group(stem), Role.MODEL))
    if plan.patched:  # a file whose dead early return is dropped calls no helper
        changes.append(runtime_change(tree))
    return [change for change in changes if change.changed]


def decide_family(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    names = None if plan.models is None else [n for n in plan.models if n not in plan.owned]
    if names == []:
        return part.not_applicable("no model file of the family asked for (--models)")
    family = plan_for_tree(
        tree, names, lambda done, total: plan.report("model files planned", done, total)
    )
    if not family.decisions:
        return part.not_applicable(
            "no model file of the family has a capture hook in this release", facts=family
        )
    touched = len(family.touched_files)
    plan.report("model files rewritten", 0, touched)
    changes = model_changes(tree, family)
    plan.report("model files rewritten", touched, touched)
    return part.applies(changes, facts=family)


def decide_tests(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    family = plan.facts(part_facts.FAMILY)
    # The Kimi files the patch rewrites (by the parts decided before this one).
    changed = plan.changed_paths()
    kimi = tuple(
        stem for stem in KIMI_CASES if tree.module_path(f"sglang.srt.models.{stem}") in changed
    )
    tests = shipped_tests(family, tree, kimi) if family is not None else {}
    if not tests:
        return part.not_applicable("no model file of the capture-hook family is rewritten")
    # The tests' utilities: a module of the package, in either layout.
    path = tree.module_path(TEST_UTILS_MODULE)
    text = render_test_utils(tree_features(tree))
    changes = [FileChange(path, tree.read_text(path), text, TESTS, Role.TEST_MODELS)]
    if tree.tests is not None:  # a package tree has no test folder: left out
        for name, text in tests.items():
            path = tree.test_path(name)
            changes.append(FileChange(path, tree.read_text(path), text, TESTS, TEST_ROLES[name]))
    return part.applies([c for c in changes if c.changed], facts=tests)


FAMILY = part.Part(part_facts.FAMILY.part, decide_family)
SHIPPED_TESTS = part.Part(part_facts.SHIPPED_TESTS.part, decide_tests)
