"""The caller codemods' metadata, in the order ``migrate`` applies the codemods, and texts
built from it for the CLI and the pull-request description.  Free of LibCST."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

from codemods.callers.records import Action
from codemods.callers.rewrite.fallback_metadata import METADATA as FALLBACK
from codemods.callers.rewrite.guard_metadata import METADATA as GUARD
from codemods.callers.rewrite.metadata import CodemodMetadata


@dataclass(frozen=True)
class Entry:
    """One caller codemod: what it is (``metadata``: id, texts, its policy option, the action
    it performs on the call sites discovery marks with it) and the transformer that performs
    it, named as ``module:Class`` so that reading the registry never loads LibCST."""

    metadata: CodemodMetadata
    transformer: str

    @property
    def action(self) -> str:
        return self.metadata.action

    def load(self) -> type:
        """The transformer class (a :class:`~codemods.callers.rewrite.callsite_codemod.CallSiteCodemod`)."""
        module, name = self.transformer.split(":")
        return getattr(importlib.import_module(module), name)


#: Applied in this order: the guard first, then the fallback wraps the (guarded) call.
ENTRIES: tuple[Entry, ...] = (
    Entry(GUARD, "codemods.callers.rewrite.guard:GuardTransformer"),
    Entry(FALLBACK, "codemods.callers.rewrite.fallback:FallbackTransformer"),
)
CODEMODS: tuple[CodemodMetadata, ...] = tuple(entry.metadata for entry in ENTRIES)
#: The actions the codemods perform (a call site marked with one of them gets rewritten).
ACTIONS: frozenset[Action] = frozenset(Action(entry.action) for entry in ENTRIES)


def policy_meanings() -> dict[tuple[str, str], str]:
    """``{("guard policy", "skip"): "when the layer ids are unset, ..."}`` for every choice."""
    return {
        (metadata.policy.label, choice.name): choice.meaning
        for metadata in CODEMODS
        for choice in metadata.policy.choices
    }


def help_epilog() -> str:
    """The codemods section of ``auxcap migrate --help``."""
    paragraphs = ["Codemods, applied in this order:"]
    paragraphs += [metadata.help_entry() for metadata in CODEMODS]
    return "\n\n".join(paragraphs)


def pr_body_sections(actions: Iterable[str] | None = None) -> str:
    """Markdown: one section per codemod (id, summary, description, review, references);
    only the codemods performing one of ``actions`` when given."""
    chosen = [m for m in CODEMODS if actions is None or m.action in set(actions)]
    return "\n".join(metadata.markdown() for metadata in chosen)
