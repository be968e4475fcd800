"""The caller codemods, in the order ``migrate`` applies them: each entry's metadata (with its
policy option), the test of which call sites it applies to, and its transformer; and texts
built from them for the CLI and the pull-request description.  Discovery asks each entry which
call sites it rewrites, the rewrite runs the entries in order, and the options, ``--help``, the
JSON/CodeTF report and the PR description list them.  Free of LibCST, so the command line, the
reports and the PR description read it without loading the parser."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from codemods.callers.records import Action, Risk, SiteFacts, Verdict, accept_actions
from codemods.callers.rewrite.metadata import CodemodMetadata, load_builtin

#: The guard codemod (:mod:`codemods.callers.rewrite.guard`).
GUARD = load_builtin("guard")
#: The fallback codemod (:mod:`codemods.callers.rewrite.fallback`).
FALLBACK = load_builtin("fallback")


def guard_applies(facts: SiteFacts) -> Verdict:
    """The guard rewrites a call whose ids may be unset for a hook that rejects None; a
    literal None (or no ids) is for review, as is a call it cannot give a guard of its own."""
    risks = facts.site.risks
    if Risk.LITERAL_NONE in risks:
        return Verdict(review="")
    if Risk.MAYBE_NONE not in risks:
        return Verdict()
    if not facts.movable:
        return Verdict(review=f"{facts.not_own}; guard the ids by hand")
    if facts.lenient and not facts.name_held:
        return Verdict(
            review=f"may also reach {', '.join(facts.lenient)}, where None means the default "
            "layers, and the hook name is not held by a name at the call; "
            "guard the ids by hand for the other hooks only"
        )
    return Verdict(applies=True)


def fallback_applies(facts: SiteFacts) -> Verdict:
    """The fallback wraps a call that may raise NotImplementedError under PP, unhandled."""
    if Risk.PP_UNSUPPORTED not in facts.site.risks:
        return Verdict()
    if not facts.movable:
        return Verdict(review=f"{facts.not_own}; handle NotImplementedError by hand")
    return Verdict(applies=True)


@dataclass(frozen=True)
class Entry:
    """One caller codemod: what it is (``metadata``: id, texts, its policy option, the action
    it performs on the call sites it applies to), which call sites it applies to
    (``applies``, a test over discovery's facts; the entries are asked in order, and a call
    site one of them leaves for review is not offered to the later ones) and the transformer
    that performs it, named as ``module:Class`` so that reading the registry never loads
    LibCST."""

    metadata: CodemodMetadata
    transformer: str
    applies: Callable[[SiteFacts], Verdict]
    #: Where the code needs the capture (:mod:`codemods.callers.analyse.required`): the note
    #: when this codemod still rewrites such a call; None: such a call is left as it is.
    where_required: str | None = None

    @property
    def action(self) -> str:
        return self.metadata.action

    def load(self) -> type:
        """The transformer class (a :class:`~codemods.callers.rewrite.callsite_codemod.CallSiteCodemod`)."""
        module, name = self.transformer.split(":")
        return getattr(importlib.import_module(module), name)


#: Applied in this order: the guard first, then the fallback wraps the (guarded) call.
ENTRIES: tuple[Entry, ...] = (
    Entry(
        GUARD,
        "codemods.callers.rewrite.guard:GuardTransformer",
        guard_applies,
        # Fail early naming the unset value: more than the hook's own error says.
        where_required="unset ids raise ValueError early, PP errors are not caught",
    ),
    Entry(FALLBACK, "codemods.callers.rewrite.fallback:FallbackTransformer", fallback_applies),
)
CODEMODS: tuple[CodemodMetadata, ...] = ()
#: The actions the codemods perform (a call site marked with one of them gets rewritten).
ACTIONS: frozenset[Action] = frozenset()


def _entries_changed() -> None:
    global CODEMODS, ACTIONS
    accept_actions(registered_actions())
    CODEMODS = tuple(entry.metadata for entry in ENTRIES)
    ACTIONS = frozenset(Action(entry.action) for entry in ENTRIES)


def registered_actions() -> frozenset[str]:
    return frozenset(entry.action for entry in ENTRIES)


def register(entry: Entry) -> None:
    """Add a codemod after the registered ones (its id, action and policy flag new)."""
    global ENTRIES
    for other in ENTRIES:
        taken = (other.metadata.id, other.action, other.metadata.policy.flag)
        mine = (entry.metadata.id, entry.action, entry.metadata.policy.flag)
        if any(a == b for a, b in zip(taken, mine, strict=True)):
            raise ValueError(f"codemod {entry.metadata.id!r} clashes with {other.metadata.id!r}")
    if entry.action in {Action.NONE.value, Action.REVIEW.value}:
        raise ValueError(f"action {entry.action!r} is reserved")
    ENTRIES = (*ENTRIES, entry)
    _entries_changed()


def unregister(entry: Entry) -> None:
    global ENTRIES
    ENTRIES = tuple(other for other in ENTRIES if other is not entry)
    _entries_changed()


@contextmanager
def registered(entry: Entry) -> Iterator[Entry]:
    """``entry`` registered for the duration of the ``with`` block."""
    register(entry)
    try:
        yield entry
    finally:
        unregister(entry)


_entries_changed()


def policy_labels() -> frozenset[str]:
    """``{"guard policy", "fallback policy", ...}``: the registered codemods' policy labels."""
    return frozenset(metadata.policy.label for metadata in CODEMODS)


def help_epilog() -> str:
    """The codemods section of ``auxcap migrate --help``."""
    paragraphs = ["Codemods, applied in this order:"]
    paragraphs += [metadata.help_entry() for metadata in CODEMODS]
    return "\n\n".join(paragraphs)
