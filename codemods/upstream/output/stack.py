"""The upstream patch as a stack of pull requests (``upstream-patch --stack DIR``).

The stack is cut from the series of the same generation
(:func:`codemods.upstream.output.series.build_series`): each PR is one or more of its
patches, or a part of one, in the order a reviewer merges them:

1. **helpers**: the runtime patch (the shipped module, the packer accessor, the sizing
   path) with the rename of SGLang's DSPARK relay and the Kimi-Linear / Kimi-K3 patch, the
   models that move onto the helpers;
2. **guard**: the runtime guard (``configure_aux_hidden_state_capture`` refuses aux capture
   under PP for a model class that does not relay it), cut out of the series' last patch;
3. **fixes**: each separate fix of a model file (not about capture), a PR of its own;
4. **one PR per model family**, with the family test's share that completes its models;
5. **dead code**: the model files whose change only drops a capture hook's early return
   that never runs (the model refuses PP in its constructor), one PR;
6. **validation**: the server-argument validation, with the init test, last.

A PR whose changed lines outside tests exceed the limit (:data:`MAX_LINES`) is split by
file, each part with a commit message of its own files.  Every file's changes keep their
order in the series, so each PR applies on the one before and the whole stack leaves
every file as the single patch does; :func:`build_stack` checks both and raises
``ValueError`` when a cut would break them.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

from codemods.upstream.edit.change_kinds import (
    FIX,
    KIMI,
    RUNTIME,
    TEST_ROLES,
    VALIDATION,
    Role,
    is_model_group,
)
from codemods.upstream.edit.patchfile import FileChange, changed_paths
from codemods.upstream.output.model_families import family_title
from codemods.upstream.output.series import RENAME, SeriesPatch, build_series
from codemods.upstream.output.series_messages import fill_message, guard_message
from codemods.upstream.result import UpstreamResult

#: The most changed lines outside tests a PR of the stack holds (where files allow).
MAX_LINES = 600

HELPERS, GUARD, FIXES, FAMILY, DEAD, VALIDATE = (
    "helpers",
    "guard",
    "fix",
    "family",
    "dead-code",
    "validation",
)
#: Where each kind of PR goes in the stack.
KIND_ORDER = (HELPERS, GUARD, FIXES, FAMILY, DEAD, VALIDATE)
#: The group key of the dead-code PR's commit.
DEAD_KEY = "dead-returns"
DEAD_TITLE = "Models refusing PP"


def is_test(change: FileChange) -> bool:
    """A shipped test file (its lines do not count against :data:`MAX_LINES`)."""
    name = change.path.rsplit("/", 1)[-1]
    return (
        change.role in TEST_ROLES
        or change.role is Role.RELAY_TEST
        or name.startswith("test_")
        or "/test/" in f"/{change.path}"
    )


def changed_lines(change: FileChange) -> int:
    """Lines the change adds plus lines it removes."""
    if not change.changed:
        return 0
    old = (change.old or "").splitlines()
    new = change.new.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return sum(
        (a2 - a1) + (b2 - b1) for tag, a1, a2, b1, b2 in matcher.get_opcodes() if tag != "equal"
    )


def code_lines(changes: list[FileChange]) -> int:
    """Changed lines outside tests."""
    return sum(changed_lines(c) for c in changes if not is_test(c))


def test_lines(changes: list[FileChange]) -> int:
    return sum(changed_lines(c) for c in changes if is_test(c))


@dataclass
class StackPR:
    """One pull request of the stack: its commits (series patches), in order."""

    number: int
    slug: str
    kind: str
    title: str
    commits: list[SeriesPatch]
    #: Names of the earlier PRs it needs (files it changes after them, helpers it calls).
    depends: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.number:02d}-{self.slug}"

    @property
    def changes(self) -> list[FileChange]:
        return [c for commit in self.commits for c in commit.changes if c.changed]

    @property
    def paths(self) -> list[str]:
        return list(dict.fromkeys(changed_paths(self.changes)))

    @property
    def code_lines(self) -> int:
        return code_lines(self.changes)

    @property
    def test_lines(self) -> int:
        return test_lines(self.changes)


def _refill(patch: SeriesPatch, changes: list[FileChange], models: list[str], result, n: int):
    """A patch of ``changes`` (a part of ``patch``), with a message of its own files."""
    title = family_title(patch.key) if is_model_group(patch.key) else ""
    part = SeriesPatch(patch.key, f"{patch.slug}-{n}" if n else patch.slug, title, "")
    part.changes, part.models = changes, models
    fill_message(part, result)
    return part


def _model_file(result: UpstreamResult, model: str) -> list[str]:
    """The files a model's patch needs: its hook's file and its capture forward's."""
    plan = result.family
    decision = None
    if plan is not None:
        decision = next((d for d in plan.decisions.values() if d.name == model), None)
    if decision is None:
        return [f"{model}.py"]
    return [decision.file] + ([decision.forward.file] if decision.forward else [])


def _bundles(patch: SeriesPatch, code: list[FileChange], result) -> list[list[FileChange]]:
    """``code`` in bundles a part never cuts: the files of each model of ``patch`` (its
    hook's file and its capture forward's) stay together, in the order they first come."""
    home = {c.path.rsplit("/", 1)[-1]: n for n, c in enumerate(code)}
    parent = list(range(len(code)))

    def root(n: int) -> int:
        while parent[n] != n:
            n = parent[n]
        return n

    for model in patch.models:
        found = [home[f] for f in _model_file(result, model) if f in home]
        for other in found[1:]:
            parent[root(other)] = root(found[0])
    bundles: dict[int, list[FileChange]] = {}
    for n, change in enumerate(code):
        bundles.setdefault(root(n), []).append(change)
    return list(bundles.values())


def split(patch: SeriesPatch, result: UpstreamResult, limit: int) -> list[SeriesPatch]:
    """``patch`` as it is when its code lines are within ``limit``; else cut by file into
    parts of at most ``limit`` code lines where files allow (a file, and the files of one
    model, are never cut apart), the test files with the last part."""
    changes = [c for c in patch.changes if c.changed]
    if code_lines(changes) <= limit:
        return [patch]
    chunks: list[list[FileChange]] = [[]]
    for bundle in _bundles(patch, [c for c in changes if not is_test(c)], result):
        if chunks[-1] and code_lines(chunks[-1] + bundle) > limit:
            chunks.append([])
        chunks[-1] += bundle
    if len(chunks) == 1:
        return [patch]
    chunks[-1] += [c for c in changes if is_test(c)]
    where = {c.path.rsplit("/", 1)[-1]: n for n, chunk in enumerate(chunks) for c in chunk}
    models: list[list[str]] = [[] for _ in chunks]
    for model in patch.models:
        found = [where[f] for f in _model_file(result, model) if f in where]
        models[min(found, default=len(chunks) - 1)].append(model)
    return [
        _refill(patch, chunk, models[n], result, n + 1) for n, chunk in enumerate(chunks) if chunk
    ]


def _dead_only(result: UpstreamResult, change: FileChange) -> bool:
    """A model file whose change only drops a hook's early return that never runs."""
    plan = result.family
    if plan is None or change.role is not Role.MODEL:
        return False
    name = change.path.rsplit("/", 1)[-1]
    decision = plan.decisions.get(name)
    if decision is None or decision.patched or not decision.dead_returns:
        return False
    return not any(
        d.patched and d.forward is not None and d.forward.file == name
        for d in plan.decisions.values()
    )


def _units(result: UpstreamResult, patches: list[SeriesPatch]):
    """``(kind, slug, title, [SeriesPatch])`` in stack order, before the line limit."""
    units: list[tuple[str, str, str, list[SeriesPatch]]] = []
    helpers = [p for p in patches if p.key in (RUNTIME, RENAME, KIMI)]
    if helpers:
        units.append((HELPERS, "helpers", _helpers_title(helpers), helpers))
    dead: list[FileChange] = []
    validation: list[FileChange] = []
    for patch in patches:
        if patch.key in (RUNTIME, RENAME, KIMI):
            continue
        if patch.key == VALIDATION:
            changes = [c for c in patch.changes if c.changed]
            guards = [c for c in changes if c.role is Role.RUNTIME_GUARD]
            validation = [c for c in changes if c.role is not Role.RUNTIME_GUARD]
            if guards and not validation:
                units.append((GUARD, "runtime-guard", patch.subject, [patch]))
            elif guards:
                guard = SeriesPatch(VALIDATION, "runtime-guard", "", "", guards)
                guard_message(guard, result)
                units.append((GUARD, "runtime-guard", guard.subject, [guard]))
            continue
        if patch.key.startswith(FIX):
            units.append((FIXES, patch.slug, patch.subject, [patch]))
            continue
        gone = [c for c in patch.changes if c.changed and _dead_only(result, c)]
        kept = [c for c in patch.changes if c.changed and c not in gone]
        dead += gone
        if gone and kept:
            patch = _refill(patch, kept, patch.models, result, 0)
        if kept:
            units.append((FAMILY, patch.slug, patch.subject, [patch]))
    if dead:
        commit = SeriesPatch(DEAD_KEY, DEAD_KEY, DEAD_TITLE, "", dead)
        fill_message(commit, result)
        units.append((DEAD, DEAD_KEY, commit.subject, [commit]))
    rest = [c for c in validation if not is_test(c)]
    if rest:
        commit = SeriesPatch(VALIDATION, "validation", "", "", validation)
        fill_message(commit, result)
        units.append((VALIDATE, "validation", commit.subject, [commit]))
    units.sort(key=lambda unit: KIND_ORDER.index(unit[0]))
    if validation and not rest and units:
        # Only the shipped tests of the last patch (the init test builds every patched
        # model): they go last.
        last = units[-1][3][-1]
        units[-1][3][-1] = dataclasses.replace(last, changes=last.changes + validation)
    return units


def _helpers_title(commits: list[SeriesPatch]) -> str:
    """The helpers PR's title: its one commit's subject, or what its commits do."""
    if len(commits) == 1:
        return commits[0].subject
    kimi = [
        title
        for stem, title in (("kimi_linear", "Kimi-Linear"), ("kimi_k3", "Kimi-K3"))
        if any(path.endswith(f"/models/{stem}.py") for c in commits[1:] for path in c.paths)
    ]
    title = "[PP] Helpers that carry aux hidden states in the PP handoff"
    return title + (f"; {' and '.join(kimi)} use them" if kimi else "")


def _prs(result: UpstreamResult, units, limit: int) -> list[StackPR]:
    """Each unit as one PR, or several where its code lines exceed ``limit``: consecutive
    commits packed while they fit, a commit over the limit cut by file."""
    prs: list[StackPR] = []
    for kind, slug, title, commits in units:
        parts = [part for commit in commits for part in split(commit, result, limit)]
        groups: list[list[SeriesPatch]] = [[]]
        for part in parts:
            if (
                groups[-1]
                and code_lines([c for p in groups[-1] + [part] for c in p.changes if c.changed])
                > limit
            ):
                groups.append([])
            groups[-1].append(part)
        for n, group in enumerate(groups, start=1):
            name = slug if len(groups) == 1 else f"{slug}-{n}"
            text = title if len(groups) == 1 else group[0].subject
            prs.append(StackPR(len(prs) + 1, name, kind, text, group))
    return prs


def _check(result: UpstreamResult, prs: list[StackPR]) -> None:
    """Every file's changes chain (each starts where the one before left the file) and end
    as in the single patch; ValueError naming the file otherwise."""
    now: dict[str, str | None] = {}
    for pr in prs:
        for change in pr.changes:
            start = now.get(change.path, change.old)
            if change.path in now and start != change.old:
                raise ValueError(f"the stack cuts {change.path} out of order (PR {pr.name})")
            now[change.path] = change.new
    wanted = {c.path: c.new for c in result.changes if c.changed}
    if now != wanted:
        differ = sorted(set(now) ^ set(wanted) | {p for p in now if now[p] != wanted.get(p)})
        raise ValueError(f"the stack does not end as the single patch: {', '.join(differ)}")


def _depends(result: UpstreamResult, prs: list[StackPR]) -> None:
    """Each PR needs the earlier PRs that change its files, the helpers (every PR that
    is not a separate fix or dead code calls them), and, for the validation, every PR
    whose models it accepts."""
    for index, pr in enumerate(prs):
        earlier = prs[:index]
        mine = set(pr.paths)
        needs = [p.name for p in earlier if mine & set(p.paths)]
        if pr.kind not in (FIXES, DEAD):
            needs += [p.name for p in earlier if p.kind == HELPERS]
        if pr.kind == VALIDATE:
            needs += [p.name for p in earlier if p.kind in (GUARD, FAMILY)]
        order = [p.name for p in earlier]
        pr.depends = sorted(set(needs), key=order.index)


def build_stack(
    result: UpstreamResult,
    patches: list[SeriesPatch] | None = None,
    limit: int = MAX_LINES,
) -> list[StackPR]:
    """The stack of ``result`` (``patches``: its series, when already built)."""
    if patches is None:
        patches = build_series(result)
    if not patches:
        return []
    prs = _prs(result, _units(result, patches), limit)
    _check(result, prs)
    _depends(result, prs)
    return prs
