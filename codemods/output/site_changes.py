"""What was done at one call site, in words: built from the codemods that rewrote it (its
actions, the ones recorded in each ``Step``), the policy each applied there and the hooks each
change covers (the guard covers the hooks that reject ``None`` and exempts EAGLE3's, which
takes ``None`` to mean its default layers), never from a policy that no site got; and, for a
call site left as it is, the facts the decision was made on (:func:`left_alone`).

Read by the CodeTF report (a change's ``description``), the commit message and the PR
description of ``migrate --branch``.  The texts are the codemods' metadata
(``codemods.toml``: each policy choice's ``change`` and ``review``); where the code needs the
capture a codemod applies its ``required_policy`` (the guard: ``raise``), whatever the run's
policy; the hint a re-raised ``NotImplementedError`` gives is the one the fallback wrote
(:func:`codemods.catalog.pp_raise.pp_hint`).

before: "guard, fallback" and a paragraph per policy, whichever sites got them.
after:  "a ValueError naming `args.ids` is raised before `set_dspark_layers_to_capture` when
        the ids are unset", for that site only; "... before `set_dflash_layers_to_capture` or
        `set_dspark_layers_to_capture` ...; `set_eagle3_layers_to_capture` is exempt: it takes
        None to mean its default layers [2, n // 2, n - 3]" where the guard tests the name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from codemods.callers.records import REQUIRED_PREFIX, Action, CallSite, Risk
from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import CodemodMetadata
from codemods.catalog.hooks import DEFAULT_HOOKS, Hook, custom_hook
from codemods.catalog.pp_raise import loses_captures_silently, pp_hint, raising_hooks

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


def hooks_of(site: CallSite) -> list[Hook]:
    """The catalog's records of the hooks ``site`` may reach (a user-added name: the strictest
    kind, as discovery treats it)."""
    return [DEFAULT_HOOKS.get(name) or custom_hook(name) for name in site.hooks]


def hint(site: CallSite) -> str:
    """What a ``NotImplementedError`` re-raised at ``site`` tells the user to do."""
    return pp_hint(hook.name for hook in raising_hooks(hooks_of(site)))


def covered(metadata: CodemodMetadata, site: CallSite) -> tuple[list[Hook], list[Hook]]:
    """The hooks ``metadata``'s change at ``site`` covers, and those it exempts (the guard:
    a hook that takes ``None`` to mean its default layers is exempt by a test of the name)."""
    hooks = hooks_of(site)
    if metadata.covers != "rejects-none":
        return hooks, []
    strict = [hook for hook in hooks if not hook.accepts_none]
    if not strict:  # not a site the guard rewrites; say what it was given
        return hooks, []
    return strict, [hook for hook in hooks if hook.accepts_none]


def _names(hooks: Iterable[Hook], code: Callable[[str], str]) -> str:
    return " or ".join(code(hook.name) for hook in hooks)


def change(
    metadata: CodemodMetadata, site: CallSite, policy: str, code: Callable[[str], str] = _plain
) -> Change:
    """What ``metadata``'s codemod, run with ``policy``, did at ``site``; ``code`` formats
    the hook and the ids (backticks in Markdown)."""
    applied = metadata.applied_policy(policy, is_required(site))
    hooks, exempt = covered(metadata, site)
    ids = code(site.ids_source) if site.ids_source is not None else None
    text = metadata.change_description(applied, _names(hooks, code), ids, hint(site))
    if exempt and metadata.exempt:
        meanings = sorted({hook.none_meaning for hook in exempt})
        text += "; " + metadata.exempt.format(
            hook=_names(exempt, code), meaning=" / ".join(meanings)
        )
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


def applied_policies(sites: Iterable[CallSite], policy_of: PolicyOf) -> dict[str, list[str]]:
    """``{"guard policy": ["raise"], ...}``: the policies the codemods applied among
    ``sites``, per codemod that changed one of them, in the order of the choices."""
    seen: dict[str, set[str]] = {}
    for site in sites:
        for item in changes(site, policy_of):
            seen.setdefault(item.metadata.policy.label, set()).add(item.policy)
    return {
        metadata.policy.label: [
            n for n in metadata.policy.names if n in seen[metadata.policy.label]
        ]
        for metadata in registry.CODEMODS
        if metadata.policy.label in seen
    }


def reviews(sites: Iterable[CallSite], policy_of: PolicyOf) -> list[str]:
    """What a reviewer checks, once per codemod and applied policy among ``sites``."""
    seen: dict[tuple[str, str], str] = {}
    for site in sites:
        for item in changes(site, policy_of):
            if item.review:
                seen.setdefault((item.metadata.action, item.policy), item.review)
    return list(seen.values())


# --------------------------------------------------------------------------- left alone


def _ids_reason(site: CallSite, hooks: list[Hook], code: Callable[[str], str]) -> str:
    """Why the ids at ``site`` needed no guard, from what discovery decided on."""
    lenient = [hook for hook in hooks if hook.accepts_none]
    if len(lenient) == len(hooks):
        meanings = " / ".join(sorted({hook.none_meaning for hook in lenient}))
        verb = "takes" if len(lenient) == 1 else "take"
        return f"{_names(lenient, code)} {verb} None to mean its {meanings}"
    if site.guarded:
        return "the call is already behind a check of the ids"
    if site.ids_source is None:
        return "no layer ids are passed"
    return f"{code(site.ids_source)} is never None here"


def _pp_reason(site: CallSite, hooks: list[Hook], code: Callable[[str], str]) -> str:
    """What happens at ``site`` under pipeline parallelism, from the release facts."""
    if Risk.PP_SILENT in site.risks:
        return (
            "under pipeline parallelism its captures are lost silently on the non-last "
            "stages of some models: apply `auxcap upstream-patch`"
        )
    if site.handles_not_implemented:
        return "it is already inside a try that handles NotImplementedError"
    if Risk.PP_UNSUPPORTED in site.risks:
        return "its NotImplementedError under pipeline parallelism is left as it is"
    text = f"no model's {_names(hooks, code)} raises NotImplementedError under pipeline parallelism"
    if loses_captures_silently(hooks):
        text += " (some drop the captures on non-last stages; this module pins pp_size to 1)"
    return text


def left_alone(site: CallSite, code: Callable[[str], str] = _plain) -> str:
    """Why no codemod rewrote ``site``, from the facts the decision was made on: whether the
    hooks it reaches accept ``None`` (EAGLE3's setter takes it to mean its default layers),
    whether the ids are checked or never ``None``, and what the hooks do under pipeline
    parallelism (per the release facts); a site skipped or left for review on purpose says so
    in its note."""
    if site.note:
        return site.note
    hooks = hooks_of(site)
    return f"nothing to change: {_ids_reason(site, hooks, code)}; {_pp_reason(site, hooks, code)}"
