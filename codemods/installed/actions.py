"""``status``, ``apply`` and ``revert`` of the SGLang an interpreter imports.

Each holds the package's lock (one command at a time) and first repairs a change a command
left half done (``transaction.recover``), saying so.
Messages go to ``say``; errors are raised (``InstalledError``: unusable input, ``Refused``:
a check failed, every byte as it was), and the CLI turns them into exit codes.

``apply`` generates the upstream change (``upstream.generate``) for exactly that tree and
release, refuses where a file that differs from the release is one the rewriters no longer
recognise (naming it), and writes the change all or nothing under a journal.  Another
project's patch whose copy is kept in the package (``foreign``) is named, and its changes
are kept: auxcap's change goes on top, and ``revert`` gives back that patch's bytes.

Long steps report to ``phases`` (``Phases``: what is being done, and how far), which the
CLI draws on a terminal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from codemods.installed import foreign, pristine, transaction
from codemods.installed import journal as jr
from codemods.installed.errors import InstalledError, Refused
from codemods.installed.journal import Entry, Journal
from codemods.installed.locate import Installation, locate
from codemods.installed.phases import NO_PHASES, Phases
from codemods.upstream.facts import GUARD
from codemods.upstream.generate import CannotApply, MissingModelFile, generate
from codemods.upstream.result import UpstreamResult
from codemods.upstream.sizing import graph_sizing
from codemods.upstream.tree.sglang_tree import TreeError
from codemods.upstream.validation import relax as validation

Say = Callable[[str], None]

#: Names only auxcap's change writes into SGLang (the glue and transport modules, the
#: validation helper, the aux sizing twins, the checked DSPARK relay): a file holding one
#: carries the change already, e.g. from ``git apply`` of ``upstream-patch``.
CHANGE_MARKER = re.compile(
    r"pp_aux_capture|pp_aux_transport|pp_proxy_aux_hidden_size|_relayed_dspark_hidden_states"
)


def carries_change(installation: Installation, path: str) -> bool:
    """Whether the file at tree path ``path`` holds a name only auxcap's change writes."""
    data = transaction.current_bytes(installation.tree, path)
    return data is not None and CHANGE_MARKER.search(data.decode("utf-8", "replace")) is not None


@dataclass
class Outcome:
    """What a command did: ``changed`` False for nothing to do."""

    installation: Installation
    changed: bool
    files: list[str]


def _recover(installation: Installation, say: Say) -> None:
    repaired = transaction.recover(installation.tree, installation.package)
    if repaired is None:
        return
    journal, done = repaired
    say(
        f"found an interrupted {journal.state} (journal of {journal.started}): rolled back "
        f"({_files(len(done.restored), 'file')} restored, "
        f"{_files(len(done.deleted), 'added file')} deleted)"
    )
    for path in done.left:
        say(f"  left as found (changed by someone else since): {path}")


def _files(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _run(python: str, say: Say, body: Callable[[Installation], Outcome]) -> Outcome:
    """Locate ``python``'s sglang, say which, and run ``body`` on it under the package's
    lock, after repairing a change left half done."""
    installation = locate(python)
    say(f"python: {installation.python} (Python {installation.python_version})")
    say(f"sglang: {installation.describe()}")
    note = installation.untried_note()
    if note is not None:
        say(note)
    with transaction.locked(installation.package):
        _recover(installation, say)
        return body(installation)


# ------------------------------------------------------------------------------- status


def status(python: str, say: Say) -> Outcome:
    return _run(python, say, lambda installation: _status(installation, say))


def _status(installation: Installation, say: Say) -> Outcome:
    journal = jr.load(installation.package)
    base = pristine.baseline(installation)
    patches = foreign.recorded_patches(installation, base) if base.known else []
    ours = _status_journal(installation, journal, patches, say)
    if not base.known:
        say(f"other differences from the release: cannot tell ({base.how})")
        return Outcome(installation, False, [])
    for patch in patches:
        say(f"another patch: {patch.describe()}{_as_recorded(patch, base)}")
    others = {
        path: kind
        for path, kind in base.differs.items()
        if path not in ours or _foreign_before(journal, path)
    }
    if not others:
        say(f"other differences from the release: none ({base.how})")
        return Outcome(installation, False, [])
    say(f"other differences from the release ({base.how}): {len(others)} files")
    journalled = {} if journal is None else {entry.path: entry for entry in journal.entries}
    for path, kind in sorted(others.items()):
        say(f"  {kind}: {path}{_difference_note(installation, journal, journalled, patches, path)}")
    return Outcome(installation, False, [])


def _status_journal(
    installation: Installation,
    journal: Journal | None,
    patches: list[foreign.RecordedPatch],
    say: Say,
) -> set[str]:
    """Say what the journal records and how each of its files stands; the files that hold
    auxcap's change as it left them."""
    ours: set[str] = set()
    if journal is None:
        say("auxcap's change: not applied (no journal in the package)")
        return ours
    tree = installation.tree
    changed = set(transaction.changed_since(tree, journal))
    restored = set(_at_before(installation, journal)) - changed
    state = "applied" if not changed and not restored else "applied, files changed since"
    if journal.release != installation.release:
        state = f"journal of release {journal.release}, not this package's"
    say(
        f"auxcap's change: {state} (release {journal.release}, "
        f"{_selection(journal.models)}, auxcap {journal.tool_version}, "
        f"{journal.started}), {len(journal.entries)} files:"
    )
    for entry in journal.entries:
        if entry.path in changed:
            what = "changed since auxcap applied it"
        elif entry.path in restored:
            what = "holds its bytes from before the change"
        else:
            what = "added by auxcap" if entry.before_sha256 is None else "patched by auxcap"
            if entry.before_pristine is False:
                patch = foreign.owner(patches, entry.path)
                what += (
                    " (around another change)"
                    if patch is None
                    else f" (on top of {patch.name}'s change)"
                )
            ours.add(entry.path)
        say(f"  {what}: {entry.path}")
    return ours


def _as_recorded(patch: foreign.RecordedPatch, base: pristine.Baseline) -> str:
    """Whether every file the patch changes differs from the release, as it should."""
    missing = sorted(path for path in patch.files if path not in base.differs)
    if not missing:
        return ", all of them differ from the release"
    return f"; {len(missing)} of them hold the release's bytes (not applied there?): " + ", ".join(
        missing
    )


def _difference_note(
    installation: Installation,
    journal: Journal | None,
    journalled: dict[str, Entry],
    patches: list[foreign.RecordedPatch],
    path: str,
) -> str:
    """What explains one difference from the release, in agreement with the journal."""
    notes = []
    patch = foreign.owner(patches, path)
    if patch is not None:
        notes.append(
            f"the copy {patch.name} keeps of itself" if path == patch.record else f"by {patch.name}"
        )
    entry = journalled.get(path)
    if entry is not None:
        notes.append(_journal_state(installation, entry))
    elif carries_change(installation, path):
        notes.append(
            "carries auxcap's change, applied without a journal"
            if journal is None
            else "carries auxcap's change, but the journal does not list it"
        )
    return f" ({'; '.join(notes)})" if notes else ""


def _journal_state(installation: Installation, entry: Entry) -> str:
    current = transaction.current_bytes(installation.tree, entry.path)
    digest = None if current is None else jr.sha256(current)
    if digest == entry.after_sha256:
        return "auxcap's change on top of it, in the journal"
    if digest == entry.before_sha256:
        return "in auxcap's journal, holds its bytes from before auxcap's change"
    return "in auxcap's journal, changed since auxcap applied its change"


def _at_before(installation: Installation, journal: Journal) -> list[str]:
    result = []
    for entry in journal.entries:
        current = transaction.current_bytes(installation.tree, entry.path)
        digest = None if current is None else jr.sha256(current)
        if digest == entry.before_sha256 and digest != entry.after_sha256:
            result.append(entry.path)
    return result


def _foreign_before(journal: Journal | None, path: str) -> bool:
    """Whether auxcap patched ``path`` around a change that was there before it."""
    if journal is None:
        return False
    return any(e.path == path and e.before_pristine is False for e in journal.entries)


# -------------------------------------------------------------------------------- apply


def _generate(installation: Installation, models: list[str] | None) -> UpstreamResult:
    """``Refused`` for a model file of a shape the rewriters do not recognise or a tree with
    no model file they rewrite (a release before the capture hooks), ``InstalledError`` for
    a model name the tree has no hook for, or a tree without the files the change is
    generated from (``srt/models/``)."""
    try:
        return generate(installation.tree.root, models=models)
    except (CannotApply, MissingModelFile) as err:
        raise Refused(f"{err}; nothing was written") from err
    except (TreeError, OSError, ValueError) as err:
        raise InstalledError(f"{err}; nothing was written") from err


def _targets(installation: Installation, result: UpstreamResult) -> dict[str, str]:
    """Tree path -> why auxcap's rewriters look at it: the model files of the plan (and the
    files their forwards live in), and the files of the other parts where that part
    applies to this release's structure: Kimi's model files where they define a DSPARK
    hook, the CUDA-graph sizing path where the release has one (or the change touches
    it), the server-arg validation hook where the release has one, the runner files
    that call a capture hook.  A part that does not
    apply to the release leaves its files to whoever else patches them."""
    tree = installation.tree
    targets: dict[str, str] = {}
    part = "a file auxcap's rewriters change"
    # The model files of the parts of their own (Kimi's) where they define their hook.
    for state in result.models:
        targets[state.path] = part
    sizing = [tree.module_path(module) for module in graph_sizing.SIZING_MODULES]
    changed = set(result.changed)
    has_path = all(tree.file(path).is_file() for path in sizing[:4])
    if has_path or changed.intersection(sizing):
        targets.update(dict.fromkeys(sizing, part))
    validation_path = tree.module_path(validation.MODULE)
    if tree.file(validation_path).is_file():
        targets[validation_path] = part
    # The runner files where the runtime guard found a call of a capture hook.
    guard = result.facts(GUARD)
    for site in guard.sites if guard is not None else ():
        targets.setdefault(site.path, part)
    if result.family is not None:
        models = tree.module_path("sglang.srt.models.x").rsplit("/", 1)[0]
        for decision in result.family.decisions.values():
            reason = "patched" if decision.patched else decision.reason
            targets[f"{models}/{decision.file}"] = reason
            if decision.forward is not None:
                targets.setdefault(f"{models}/{decision.forward.file}", reason)
    return targets


def foreign_conflicts(
    installation: Installation, result: UpstreamResult, base: pristine.Baseline
) -> list[str]:
    """Files that differ from the release where auxcap's rewriters would change them but
    now do not, and that do not carry auxcap's change already: ``path: reason`` each."""
    changed = set(result.changed)
    conflicts = []
    targets = _targets(installation, result)
    for path, kind in sorted(base.differs.items()):
        if path in changed or path not in targets or kind == pristine.ADDED:
            continue
        if carries_change(installation, path):
            continue
        reason = targets[path]
        if reason == "patched" or reason.startswith("a file auxcap"):
            reason = "its code is no longer the shape auxcap's rewriters recognise"
        conflicts.append(
            f"{path}: {kind} since release {installation.release} and not patched ({reason})"
        )
    return conflicts


def _same_release(installation: Installation, journal: Journal) -> None:
    """``Refused`` when the journal was written for another release (the package was
    reinstalled or upgraded over auxcap's change): its bytes belong to that release."""
    if journal.release != installation.release:
        raise Refused(
            f"{jr.journal_path(installation.package)}: a journal of sglang "
            f"{journal.release}, but the package is {installation.release} (reinstalled "
            f"since?); its bytes belong to the other release, so nothing is restored or "
            f"applied; delete the journal if the package was reinstalled"
        )


def _selection(models: list[str] | None) -> str:
    return "every model" if models is None else "--models " + ",".join(models)


def _already(
    installation: Installation, journal: Journal, models: list[str] | None, say: Say
) -> Outcome:
    _same_release(installation, journal)
    if journal.models != models:
        raise Refused(
            f"auxcap's change is applied for {_selection(journal.models)}, not "
            f"{_selection(models)}; revert it first to apply another selection"
        )
    changed = transaction.changed_since(installation.tree, journal)
    restored = _at_before(installation, journal)
    if changed or restored:
        raise Refused(
            "auxcap's change is applied but files changed since: "
            + ", ".join(changed + restored)
            + "; revert it first (revert --force restores "
            "them)"
        )
    say(f"nothing to do: auxcap's change is already applied ({len(journal.entries)} files)")
    return Outcome(installation, False, journal.paths)


def apply(python: str, models: list[str] | None, say: Say, phases: Phases = NO_PHASES) -> Outcome:
    return _run(python, say, lambda installation: _apply(installation, models, say, phases))


def _apply(
    installation: Installation, models: list[str] | None, say: Say, phases: Phases
) -> Outcome:
    journal = jr.load(installation.package)
    if journal is not None:
        return _already(installation, journal, models, say)
    phases.phase("generating the change from the model files")
    result = _generate(installation, models)
    changes = [change for change in result.changes if change.changed]
    phases.phase("comparing the files with the release")
    base = pristine.baseline(installation)
    if not base.known:
        say(f"differences from the release: cannot tell ({base.how})")
    conflicts = foreign_conflicts(installation, result, base) if base.known else []
    if conflicts:
        raise Refused(
            "the tree differs from its release where auxcap would patch it; "
            "nothing was written:\n  " + "\n  ".join(conflicts)
        )
    if not changes:
        say("nothing to do: the tree already carries the change")
        return Outcome(installation, False, [])
    patches = foreign.recorded_patches(installation, base) if base.known else []
    tree = installation.tree
    entries, new_bytes = [], {}
    for change in changes:
        if change.path in new_bytes:
            raise InstalledError(f"{change.path}: changed twice by the generator")
        before = transaction.current_bytes(tree, change.path)
        if (before is None) != (change.old is None) or (
            before is not None and before.decode("utf-8") != change.old
        ):
            raise Refused(
                f"{tree.file(change.path)}: changed while the change was being "
                f"generated; nothing was written"
            )
        after = change.new.encode("utf-8")
        pristine_before = _pristine(base, change.path, before)
        entries.append(Entry.of(change.path, before, after, pristine_before))
        new_bytes[change.path] = after
    journal = Journal(
        state=jr.APPLYING,
        release=installation.release,
        tree_root=str(tree.root),
        package=str(installation.package),
        models=models,
        entries=entries,
    )
    transaction.write_all(
        tree, installation.package, journal, new_bytes, installation.python, phases
    )
    say(
        f"applied: {_files(len(entries), 'file')} changed, compiled with "
        f"{installation.python}; "
        f"journal {jr.journal_path(installation.package)}"
    )
    for patch in patches:
        say(
            f"on top of another patch: {patch.describe()}; its changes are kept, "
            f"and revert gives them back as they are now"
        )
    for entry in entries:
        what = "added" if entry.before_sha256 is None else "patched"
        note = ""
        if entry.before_pristine is False:
            owner = foreign.owner(patches, entry.path)
            note = (
                f" (on top of {owner.name}'s change, kept)"
                if owner
                else " (around another change, kept)"
            )
        say(f"  {what}: {entry.path}{note}")
    return Outcome(installation, True, [e.path for e in entries])


def _pristine(base: pristine.Baseline, path: str, before: bytes | None) -> bool | None:
    if not base.known:
        return None
    if before is None:
        return path not in base.hashes
    if base.hashes:
        return base.hashes.get(path) == jr.sha256(before)
    return path not in base.differs


# ------------------------------------------------------------------------------- revert


def revert(python: str, force: bool, say: Say) -> Outcome:
    return _run(python, say, lambda installation: _revert(installation, force, say))


def _revert(installation: Installation, force: bool, say: Say) -> Outcome:
    journal = jr.load(installation.package)
    if journal is None:
        say("nothing to revert: no journal of auxcap's change in the package")
        return Outcome(installation, False, [])
    _same_release(installation, journal)
    changed = transaction.changed_since(installation.tree, journal)
    if changed and not force:
        raise Refused(
            "files changed since auxcap applied its change; nothing was restored "
            "(--force restores them anyway):\n  " + "\n  ".join(changed)
        )
    done = transaction.restore(installation.tree, installation.package, journal, force=force)
    discarded = set(changed)
    lost = f" ({_files(len(discarded), 'local change')} discarded)" if discarded else ""
    say(
        f"reverted: {_files(len(done.restored), 'file')} restored, "
        f"{_files(len(done.deleted), 'added file')} deleted{lost}; journal removed"
    )
    for label, paths in (("restored", done.restored), ("deleted", done.deleted)):
        for path in paths:
            mark = " (local change discarded)" if path in discarded else ""
            say(f"  {label}{mark}: {path}")
    return Outcome(installation, True, done.restored + done.deleted)
