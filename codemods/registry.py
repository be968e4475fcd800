"""The caller codemods' metadata, in the order ``migrate`` applies the codemods, and texts
built from it for the CLI and the pull-request description.  Free of LibCST."""

from __future__ import annotations

from collections.abc import Iterable

from codemods.fallback_metadata import METADATA as FALLBACK
from codemods.guard_metadata import METADATA as GUARD
from codemods.metadata import CodemodMetadata

#: Applied in this order: the guard first, then the fallback wraps the (guarded) call.
CODEMODS: tuple[CodemodMetadata, ...] = (GUARD, FALLBACK)


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
