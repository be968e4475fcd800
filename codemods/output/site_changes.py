"""What was done at one rewritten call site, in words: built from the codemods that rewrote it
(its actions, the ones recorded in each ``Step``) and the policy each applied there, never
from a policy that no site got.

Read by the CodeTF report (a change's ``description``), the commit message and the PR
description of ``migrate --branch``.  The texts are the codemods' metadata
(``codemods.toml``: each policy choice's ``change`` and ``review``); where the code needs the
capture a codemod applies its ``required_policy`` (the guard: ``raise``), whatever the run's
policy; the hint a re-raised ``NotImplementedError`` gives is the one the fallback wrote
(:func:`codemods.catalog.pp_raise.pp_hint`).

before: "guard, fallback" and a paragraph per policy, whichever sites got them.
after:  "a ValueError naming `args.ids` is raised before `set_dspark_layers_to_capture` when
        the ids are unset", for that site only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from codemods.callers.records import REQUIRED_PREFIX, Action, CallSite
from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import CodemodMetadata
from codemods.catalog.hooks import DEFAULT_HOOKS, custom_hook
from codemods.catalog.pp_raise import pp_hint, raising_hooks

#: The policy a codemod runs with (``options.policy``, or a lookup in the run's policies).
PolicyOf = Callable[[CodemodMetadata], str]


def _plain(text: str) -> str:
    return text


@dataclass(frozen=True)
class Change:
    """One codemod's change at one call site."""

    metadata: CodemodMetadata
    #: The policy it applied there.
    policy: str
    #: The change in words.
    text: str
    #: What a reviewer checks where it was made ("" when nothing particular).
    review: str


def is_required(site: CallSite) -> bool:
    """The code around the call needs the capture (the site's note says where)."""
    return site.note.startswith(REQUIRED_PREFIX)


def hint(site: CallSite) -> str:
    """What a ``NotImplementedError`` re-raised at ``site`` tells the user to do."""
    hooks = [DEFAULT_HOOKS.get(name) or custom_hook(name) for name in site.hook.split("|")]
    return pp_hint(hook.name for hook in raising_hooks(hooks))


def change(
    metadata: CodemodMetadata, site: CallSite, policy: str, code: Callable[[str], str] = _plain
) -> Change:
    """What ``metadata``'s codemod, run with ``policy``, did at ``site``; ``code`` formats
    the hook and the ids (backticks in Markdown)."""
    applied = metadata.applied_policy(policy, is_required(site))
    hook = " or ".join(code(name) for name in site.hook.split("|"))
    ids = code(site.ids_source) if site.ids_source is not None else None
    text = metadata.change_description(applied, hook, ids, hint(site))
    return Change(metadata, applied, text, metadata.policy.choice(applied).review)


def changes(
    site: CallSite, policy_of: PolicyOf, code: Callable[[str], str] = _plain
) -> list[Change]:
    """Every codemod's change at ``site``, in the order they were applied."""
    return [
        change(metadata, site, policy_of(metadata), code)
        for metadata in registry.CODEMODS
        if Action(metadata.action) in site.actions
    ]


def reviews(sites: Iterable[CallSite], policy_of: PolicyOf) -> list[str]:
    """What a reviewer checks, once per codemod and applied policy among ``sites``."""
    seen: dict[tuple[str, str], str] = {}
    for site in sites:
        for item in changes(site, policy_of):
            if item.review:
                seen.setdefault((item.metadata.action, item.policy), item.review)
    return list(seen.values())
