"""The upstream patch as an ordered, reviewable series (``upstream-patch --series DIR``).

The single patch of :func:`codemods.upstream.generate.generate` is cut into patches a
reviewer can take one at a time, in this order:

1. **transport and sizing**: the shipped modules (``srt/distributed/...``), the transport's
   own test, and the files that size the PP proxy buffers (model runner, buffer helpers,
   graph runners);
2. **one patch per model group**, a group being the rewriter that patched the model file:
   the Kimi DSPARK relay (Kimi-Linear, Kimi-K3), the layer-entry callback, the gathered
   collector, the legacy append loop, ...  The group comes from the plan's decision for the
   file (its capture kinds); a file without a decision is classified by its path.  The
   family test grows with the groups: each group's patch adds that group's models to it;
3. **validation**: server arguments and validation hooks.

Every changed file ends in the series exactly as in the single patch, so applying the whole
series equals applying the single patch.  Each patch is written ``git format-patch`` style
(``From``/``Date``/``Subject`` headers, the commit message, then the diff), so ``git am``
turns the series into a stack of commits and ``git apply`` takes the patches in order.
"""

from __future__ import annotations

import dataclasses
import email.utils
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

from codemods.upstream.family import FamilyPlan, FileDecision
from codemods.upstream.family_patch import TEST_FILE as FAMILY_TEST_FILE
from codemods.upstream.family_patch import TEST_MODELS_FILE as FAMILY_MODELS_FILE
from codemods.upstream.family_patch import render_test
from codemods.upstream.family_report import CAPTURE_KINDS
from codemods.upstream.generate import KIMI_NAME, UpstreamResult
from codemods.upstream.patchfile import FileChange, changed_paths, render_patch

TRANSPORT = "transport"
VALIDATION = "validation"
KIMI = "kimi"
#: Model files whose rewriter the series cannot tell (a decision it does not know).
OTHER_MODELS = "other-models"

#: Model groups: capture kind -> (group key, slug, title).  A kind missing here becomes a
#: group of its own, named after the kind.
KIND_GROUPS = {
    "entry-callback": ("entry-callback", "layer-entry-callback",
                       "models capturing through the layer-entry callback"),
    "entry-gathered": ("entry-gathered", "gathered-collector",
                       "models handing a gathered collector to their layers"),
    "loop-append": ("loop", "layer-loop-append", "models appending in the layer loop"),
    "after-layer": ("loop", "layer-loop-append", "models appending in the layer loop"),
    "boundaries": ("boundaries", "layer-boundaries", "models capturing at layer boundaries"),
    "layer-kwarg": ("layer-list", "layer-handed-list",
                    "models handing the capture list to their layers"),
    "layer-flag": ("layer-list", "layer-handed-list",
                   "models handing the capture list to their layers"),
}
#: Where the groups go in the series (unknown groups after these, by name).
GROUP_ORDER = (KIMI, "entry-callback", "entry-gathered", "loop", "boundaries", "layer-list")

_VALIDATION_PARTS = ("server_args", "validation", "/arg_groups/")
_TRANSPORT_TESTS = ("test_pp_aux_capture.py",)


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
        """The patch as ``git format-patch`` writes it."""
        stat = "".join(f" {path}\n" for path in self.paths)
        return (
            "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
            f"From: {author}\n"
            f"Date: {date}\n"
            f"Subject: [PATCH {number}/{total}] {self.subject}\n"
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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "patch"


def _stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def decision_group(decision: FileDecision) -> tuple[str, str, str]:
    """(group key, slug, title) of a patched model file, from its capture kinds."""
    for kind in decision.capture_kinds:
        if kind in KIND_GROUPS:
            return KIND_GROUPS[kind]
    if decision.capture_kinds:
        kind = decision.capture_kinds[0]
        return kind, _slug(kind), f"models whose capture is {CAPTURE_KINDS.get(kind, kind)}"
    return OTHER_MODELS, "other-models", "other model files"


def classify(path: str, plan: FamilyPlan | None) -> tuple[str, str, str]:
    """(group key, slug, title) of one changed file of the patch."""
    stem = _stem(path)
    name = path.rsplit("/", 1)[-1]
    if "/models/" in path:
        if stem.startswith("kimi"):
            return KIMI, "kimi-dspark-relay", "Kimi models: DSPARK captures relayed across stages"
        if plan is not None:
            decision = plan.decisions.get(f"{stem}.py")
            if decision is not None and decision.patched:
                return decision_group(decision)
            # A file patched as the capture forward of another file's hooks.
            for other in sorted(plan.decisions.values(), key=lambda d: d.file):
                if other.patched and other.forward is not None and other.forward.file == name:
                    return decision_group(other)
        return OTHER_MODELS, "other-models", "other model files"
    if any(part in path for part in _VALIDATION_PARTS):
        return VALIDATION, "validation", "validation"
    # Any other file outside the models is something the models build on: it goes first.
    return TRANSPORT, "transport-and-sizing", "transport and sizing"


def _group_rank(key: str) -> tuple[int, str]:
    if key == TRANSPORT:
        return (0, "")
    if key == VALIDATION:
        return (3, "")
    if key in GROUP_ORDER:
        return (1, f"{GROUP_ORDER.index(key):03d}")
    if key == OTHER_MODELS:
        return (2, "")
    return (1, f"999-{key}")


def _model_list(names: Sequence[str]) -> str:
    return ", ".join(sorted(dict.fromkeys(names)))


def _hooks(plan: FamilyPlan | None, names: Sequence[str]) -> list[str]:
    if plan is None:
        return []
    hooks = []
    for decision in plan.decisions.values():
        if decision.patched and decision.name in names:
            hooks += [hook for _, _, hs in decision.cases for hook in hs]
    return sorted(dict.fromkeys(hooks))


def _test_command(result: UpstreamResult, filename: str) -> str:
    tree = result.tree
    if tree.kind == "checkout":
        return f"cd {tree.tests} && python3 -m unittest {filename.removesuffix('.py')}"
    return f"python3 -m unittest sglang.test.{filename.removesuffix('.py')}"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=72, break_on_hyphens=False) + "\n"


def _message(key: str, title: str, patch: SeriesPatch, result: UpstreamResult) -> None:
    """Fill ``patch.subject`` and ``patch.body``."""
    files = "".join(f"- {path}\n" for path in patch.paths)
    plan = result.family
    if key == TRANSPORT:
        sizing = [p for p in patch.paths if not p.endswith(("pp_aux_transport.py",
                                                             "pp_aux_plan.py",
                                                             "pp_aux_capture.py"))
                  and p.rsplit("/", 1)[-1] not in _TRANSPORT_TESTS]
        patch.subject = "[PP] Add the PP aux hidden-state transport" + (
            " and size its proxy buffers" if sizing else "")
        patch.body = (
            "Captures made on earlier pipeline stages ride the PP handoff to the last\n"
            "stage, which rebuilds the list a PP=1 run produces (same count, order and\n"
            "values) and raises, naming the layers, when one is missing.  This patch adds\n"
            "the transport and the glue the model files call; nothing uses them yet.\n"
            + ("The PP proxy buffers of non-first stages are sized for the aux entry, so\n"
               "CUDA-graph capture and replay carry it.\n" if sizing else "")
            + f"\nFiles:\n{files}"
            + "".join(f"\nTest: {_test_command(result, p.rsplit('/', 1)[-1])}\n"
                      for p in patch.paths if p.rsplit("/", 1)[-1] in _TRANSPORT_TESTS)
        )
        return
    if key == VALIDATION:
        patch.subject = "[PP] Accept aux hidden-state capture with pipeline parallelism"
        patch.body = (
            "Server-argument validation refused speculative decoding that reads aux\n"
            "hidden states under PP because captures were lost off the last stage.  With\n"
            "the earlier patches of this series the captures reach the last stage, so the\n"
            "refusal is relaxed where that holds; every other refusal is kept.\n"
            f"\nFiles:\n{files}"
        )
        return
    models = _model_list(patch.models)
    hooks = _hooks(plan, patch.models)
    patch.subject = f"[PP] Carry aux hidden states across stages: {models}"
    if len(patch.subject) > 72:
        count = len(set(patch.models))
        patch.subject = (f"[PP] Carry aux hidden states across stages: {count} "
                         f"{patch.slug.replace('-', ' ')} models")
    hook_line = (_wrap(f"Hooks: {', '.join(hooks)}.") if hooks
                 else "Hook: set_dspark_layers_to_capture.\n" if key == KIMI else "")
    test = ""
    if any(p.endswith(FAMILY_TEST_FILE) for p in patch.paths):
        test = (f"\nTest: {_test_command(result, FAMILY_TEST_FILE)} (this patch adds its "
                "models to the family test).\n")
    elif key == KIMI:
        test = (f"\nTest: {_test_command(result, _TRANSPORT_TESTS[0])}, and the model "
                "driven as real PP stages.\n")
    patch.body = (
        f"{_wrap(f'Group: {title}.  Models: {models}.')}"
        f"{hook_line}"
        "The capture hooks store the ids on every rank instead of returning early off\n"
        "the last one; each stage adds its captures to the PP handoff and the last stage\n"
        "gathers them in PP=1 order.  With PP=1 nothing changes.\n"
        f"\nFiles:\n{files}{test}"
    )


def _family_test_text(result: UpstreamResult, names: set[str]) -> str:
    """The family test with only the models in ``names``."""
    plan = result.family
    assert plan is not None
    decisions = {f: d for f, d in plan.decisions.items() if d.name in names}
    return render_test(dataclasses.replace(plan, decisions=decisions))


def build_series(result: UpstreamResult) -> list[SeriesPatch]:
    """The ordered series of ``result``'s changes (empty when nothing changes)."""
    changes = [change for change in result.changes if change.changed]
    if not changes:
        return []
    plan = result.family
    groups: dict[str, SeriesPatch] = {}
    family_test: FileChange | None = None
    family_models: FileChange | None = None
    for change in changes:
        if change.path.endswith(FAMILY_TEST_FILE):
            family_test = change
            continue
        if change.path.endswith(FAMILY_MODELS_FILE):
            family_models = change
            continue
        key, slug, title = classify(change.path, plan)
        patch = groups.setdefault(key, SeriesPatch(key, slug, title, ""))
        patch.changes.append(change)
        if key not in (TRANSPORT, VALIDATION):
            stem = _stem(change.path)
            decision = plan.decisions.get(f"{stem}.py") if plan is not None else None
            if stem == KIMI_NAME or key == KIMI or (decision is not None and decision.patched):
                patch.models.append(stem)
    # Models patched only through another file's forward still belong to their group.
    if plan is not None:
        for decision in plan.decisions.values():
            if not decision.patched:
                continue
            key = classify(f"srt/models/{decision.file}", plan)[0]
            if key in groups and decision.name not in groups[key].models:
                groups[key].models.append(decision.name)
    ordered = sorted(groups.values(), key=lambda p: _group_rank(p.key))
    if family_test is not None:
        _spread_family_test(result, family_test, ordered, family_models)
    elif family_models is not None:
        ordered[0].changes.append(family_models)
    for patch in ordered:
        title = patch.subject
        _message(patch.key, title, patch, result)
    return ordered


def _spread_family_test(result: UpstreamResult, change: FileChange,
                        ordered: list[SeriesPatch],
                        models: FileChange | None = None) -> None:
    """Each model group's patch adds its models to the family test; the last of them
    leaves the file exactly as the single patch does.  The test's stand-in models
    (``models``) come with the first patch that changes the test."""
    model_patches = [p for p in ordered if p.key not in (TRANSPORT, VALIDATION, KIMI)]
    if not model_patches:
        ordered[0].changes += [c for c in (models, change) if c is not None]
        return
    current = change.old
    seen: set[str] = set()
    for index, patch in enumerate(model_patches):
        seen |= set(patch.models)
        last = index == len(model_patches) - 1
        text = change.new if last else _family_test_text(result, seen)
        if text != current:
            if models is not None:
                patch.changes.append(models)
                models = None
            patch.changes.append(FileChange(change.path, current, text))
            current = text


def render_series(patches: Sequence[SeriesPatch], author: str,
                  date: str | None = None) -> dict[str, str]:
    """``file name -> text`` of every patch, in order."""
    date = date or email.utils.formatdate(localtime=False)
    total = len(patches)
    return {
        patch.filename(number): patch.mail(number, total, author, date)
        for number, patch in enumerate(patches, start=1)
    }
