"""The upstream patch as an ordered, reviewable series (``upstream-patch --series DIR``).

The single patch of :func:`codemods.upstream.generate.generate` is cut into patches a
reviewer can take one at a time, in this order:

1. **runtime**: the helpers the models call (the shipped runtime module), the packer
   accessor, and the PP proxy entry's sizing path where the tree has none (with the
   dummy-forward buffers);
   **rename**: where SGLang relays DSPARK captures itself (0.5.21+), the rename of that
   relay's entry and of its CUDA-graph sizing to serve every capture method, a commit of
   its own right after the runtime (with the aux entry of the dummy-forward buffers,
   which asks the renamed width getter);
2. **one patch per model family**, the way reviewers own model code (Kimi, Llama / Qwen
   dense, Qwen MoE / VL, DeepSeek, GLM, ...): a model file belongs to the family its file
   name maps to in :mod:`codemods.upstream.output.model_families`.  The family test grows with the
   families: a model joins it with the patch that completes it (its hook's file and the file
   of its capture forward both patched);
3. **validation**: server arguments and validation hooks.  The test that builds every
   patched model through its real ``__init__`` (``test_pp_aux_capture.py``) comes with the
   last patch of the series, when everything it checks is in place.

Each file change carries its group and role from the part of the generator that made it
(:mod:`codemods.upstream.edit.change_kinds`); the series reads them.  A file that parts of
different groups change (``model_runner.py``: the sizing, then the runtime guard's
``pp_size=`` argument) is cut into one change per group, each patch starting where the
one before left the file.

A fix the patch makes in a model file that is not about capture under PP (a stack setter
the hook calls but the stack lacks, a forward that unpacks non-last stages' output) is a
patch of its own, right after the runtime, and the file's family patch starts from it.

Each commit message names the files of its own patch and what changed in them
(:mod:`codemods.upstream.output.series_messages`).  Every changed file ends in the series exactly as
in the single patch, so applying the whole series equals applying the single patch.  Each
patch is written ``git format-patch`` style (``From``/``Date``/``Subject`` headers, the
commit message, then the diff; the subject kept as with ``format-patch -k``), so
``git am -k`` turns the series into a stack of commits with these subjects and
``git apply`` takes the patches in order.
"""

from __future__ import annotations

import dataclasses
import email.utils
from collections.abc import Sequence
from dataclasses import dataclass, field

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit.change_kinds import (
    FIX,
    KIMI,
    RENAME_ROLES,
    RUNTIME,
    VALIDATION,
    Role,
    fix_group,
    is_model_group,
)
from codemods.upstream.edit.patchfile import FileChange, changed_paths, render_patch
from codemods.upstream.output.model_families import OTHER, family_rank, family_title
from codemods.upstream.output.series_messages import RENAME, fill_message
from codemods.upstream.result import UpstreamResult
from codemods.upstream.validation.shipped_tests import render_test

__all__ = [
    "FIX",
    "RENAME",
    "KIMI",
    "RUNTIME",
    "VALIDATION",
    "OTHER_MODELS",
    "SeriesPatch",
    "classify",
    "build_series",
    "render_series",
]

#: Model files no family prefix matches.
OTHER_MODELS = OTHER[0]


@dataclass
class SeriesPatch:
    """One patch of the series: its commit message and the file changes it makes."""

    key: str
    slug: str
    subject: str
    body: str
    changes: list[FileChange] = field(default_factory=list)
    models: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return changed_paths(self.changes)

    @property
    def diff(self) -> str:
        return render_patch(self.changes)

    def filename(self, number: int) -> str:
        return f"{number:04d}-{self.slug}.patch"

    def message(self) -> str:
        return f"{self.subject}\n\n{self.body.rstrip()}\n"

    def mail(self, number: int, total: int, author: str, date: str) -> str:
        """The patch as ``git format-patch -k`` writes it: the subject as is (no ``[PATCH
        n/m]``), so ``git am -k`` commits it unchanged, ``[PP]`` prefix included."""
        stat = "".join(f" {path}\n" for path in self.paths)
        return (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {author}\n"
            f"Date: {date}\n"
            f"Subject: {self.subject}\n"
            "\n"
            f"{self.body.rstrip()}\n"
            "---\n"
            f"{stat}"
            "\n"
            f"{self.diff}"
            "-- \n"
            "auxcap\n"
            "\n"
        )


def _stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def classify(change: FileChange, renamed: bool = False) -> tuple[str, str, str]:
    """(group key, file-name slug, title) of one changed file of the patch; ``renamed``:
    the patch renames SGLang's DSPARK relay, whose width getter the dummy-forward buffers
    then ask (so they go with the rename)."""
    if change.group == VALIDATION:
        return VALIDATION, "validation", "validation"
    if change.group == RUNTIME and (
        change.role in RENAME_ROLES or (renamed and change.role is Role.WARMUP_SIZING)
    ):
        return (
            RENAME,
            f"rename-{NATIVE.family}-relay",
            f"rename: SGLang's {NATIVE.name} relay for every method",
        )
    if change.group == RUNTIME:
        return RUNTIME, "runtime", "runtime: aux hidden states in the PP handoff"
    if change.group.startswith(FIX):
        return change.group, change.group, ""
    return change.group, change.group, family_title(change.group)


def _group_rank(key: str) -> tuple[int, int, str]:
    if key == RUNTIME:
        return (0, 0, "")
    if key == RENAME:
        return (0, 1, "")
    if key.startswith(FIX):
        return (1, 0, key)
    if key == VALIDATION:
        return (3, 0, "")
    return (2, family_rank(key), "")


def _family_test_text(result: UpstreamResult, names: set[str]) -> str:
    """The family test with only the models in ``names``."""
    plan = result.family
    assert plan is not None
    decisions = {f: d for f, d in plan.decisions.items() if d.name in names}
    return render_test(dataclasses.replace(plan, decisions=decisions))


def _by_group(result: UpstreamResult, change: FileChange) -> list[FileChange]:
    """``change`` cut into one change per series group, where parts of different groups
    change its file (the runtime guard passing ``pp_size`` in the ``model_runner.py``
    the sizing changed): each starts where the one before left the file, in the order
    of the parts, which is the order of the series.  As it is otherwise (one group, or
    groups the series would take out of order)."""
    steps: list[FileChange] = []
    for answer in result.parts:
        for step in answer.decision.changes:
            if step.path != change.path or not step.changed:
                continue
            if steps and classify(steps[-1])[0] == classify(step)[0]:
                steps[-1] = dataclasses.replace(steps[-1], new=step.new)
            else:
                old = steps[-1].new if steps else change.old
                steps.append(dataclasses.replace(step, old=old))
    ranks = [_group_rank(classify(step)[0]) for step in steps]
    if len(steps) < 2 or ranks != sorted(set(ranks)) or steps[-1].new != change.new:
        return [change]
    steps[0] = dataclasses.replace(steps[0], group=change.group, role=change.role)
    return steps


def build_series(result: UpstreamResult) -> list[SeriesPatch]:
    """The ordered series of ``result``'s changes (empty when nothing changes)."""
    changes = [
        step for change in result.changes if change.changed for step in _by_group(result, change)
    ]
    if not changes:
        return []
    plan = result.family
    decisions = plan.decisions if plan is not None else {}
    fixed = plan.fixes_only() if plan is not None else {}
    groups: dict[str, SeriesPatch] = {}
    family_test: FileChange | None = None
    family_models: FileChange | None = None
    for index, change in enumerate(changes):
        name = change.path.rsplit("/", 1)[-1]
        if change.role is Role.MODEL and name in fixed and change.old is not None:
            # The fix on its own first; the family patch starts from the fixed file.
            stem = _stem(change.path)
            key = fix_group(stem)
            groups[key] = SeriesPatch(
                key,
                key,
                "",
                "",
                [FileChange(change.path, change.old, fixed[name], key, Role.FIX)],
                [stem],
            )
            changes[index] = dataclasses.replace(change, old=fixed[name])
    init_test: FileChange | None = None
    model_files: dict[str, str] = {}
    renamed = any(change.role in RENAME_ROLES for change in changes)
    for change in changes:
        if change.role is Role.INIT_TEST:
            init_test = change
            continue
        if change.role is Role.FAMILY_TEST:
            family_test = change
            continue
        if change.role is Role.TEST_MODELS:
            family_models = change
            continue
        key, slug, title = classify(change, renamed)
        patch = groups.setdefault(key, SeriesPatch(key, slug, title, ""))
        patch.changes.append(change)
        if change.role is Role.MODEL:
            stem = _stem(change.path)
            model_files[f"{stem}.py"] = key
            decision = decisions.get(f"{stem}.py")
            if key == KIMI or (decision is not None and decision.patched):
                patch.models.append(stem)
    # A model whose own file is unchanged (only its capture forward is) goes with that file.
    for decision in decisions.values():
        if not decision.patched or decision.forward is None:
            continue
        key = model_files.get(decision.forward.file, "")
        listed = any(decision.name in patch.models for patch in groups.values())
        if key in groups and not listed:
            groups[key].models.append(decision.name)
    ordered = sorted(groups.values(), key=lambda p: _group_rank(p.key))
    if family_test is not None:
        _spread_family_test(result, family_test, ordered, family_models)
    elif family_models is not None:
        ordered[0].changes.append(family_models)
    if init_test is not None:
        # It builds every patched model and checks the validation: once all is in place.
        ordered[-1].changes.append(init_test)
    for patch in ordered:
        fill_message(patch, result)
    return ordered


def _ready(result: UpstreamResult, patches: list[SeriesPatch]) -> dict[str, int]:
    """Model name -> index (in ``patches``) of the patch that completes it: the later of the
    patches changing its hook's file and its capture forward's file."""
    plan = result.family
    ready: dict[str, int] = {}
    if plan is None:
        return ready
    where = {
        path.rsplit("/", 1)[-1]: index
        for index, patch in enumerate(patches)
        for path in patch.paths
        if "srt/models/" in path
    }
    for decision in plan.decisions.values():
        if not decision.patched:
            continue
        files = [decision.file] + ([decision.forward.file] if decision.forward else [])
        found = [where[file] for file in files if file in where]
        ready[decision.name] = max(found, default=len(patches) - 1)
    return ready


def _spread_family_test(
    result: UpstreamResult,
    change: FileChange,
    ordered: list[SeriesPatch],
    models: FileChange | None = None,
) -> None:
    """Each family's patch adds the models it completes to the family test; the last model
    patch leaves the file exactly as the single patch does.  The test's stand-in models
    (``models``) come with the first patch that changes the test."""
    model_patches = [p for p in ordered if is_model_group(p.key) and p.key != RENAME]
    if not model_patches:
        ordered[0].changes += [c for c in (models, change) if c is not None]
        return
    ready = _ready(result, model_patches)
    current = change.old
    for index, patch in enumerate(model_patches):
        last = index == len(model_patches) - 1
        seen = {name for name, at in ready.items() if at <= index}
        if not seen and not last:
            continue
        text = change.new if last else _family_test_text(result, seen)
        if text != current:
            if models is not None:
                patch.changes.append(models)
                models = None
            patch.changes.append(dataclasses.replace(change, old=current, new=text))
            current = text


def render_series(
    patches: Sequence[SeriesPatch], author: str, date: str | None = None
) -> dict[str, str]:
    """``file name -> text`` of every patch, in order."""
    date = date or email.utils.formatdate(localtime=False)
    total = len(patches)
    return {
        patch.filename(number): patch.mail(number, total, author, date)
        for number, patch in enumerate(patches, start=1)
    }
