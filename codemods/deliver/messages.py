"""Commit messages and pull-request descriptions for a delivered change.

Text only, from records: ``FileResult``/``CallSite`` for ``migrate``, :class:`PatchedFile` for
``upstream-patch``, :class:`Verification` for what was checked, and the
:class:`~codemods.deliver.git_branch.DeliveryResult` of the commit.

before: records of what auxcap changed.
after:  a commit message (title line, blank line, what was done at each rewritten call site,
        how to re-check) and a Markdown PR description (per call site what was done and why,
        what a reviewer checks, what was not rewritten and why, re-check, verification,
        revert).  What is said of a call site comes from the codemods that rewrote it and the
        policy each applied there (:mod:`codemods.output.site_changes`), so a change that only
        adds a ``raise`` is described as that and nothing else.
"""

from __future__ import annotations

import shlex
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from codemods.callers.records import (
    REQUIRED_PREFIX,
    SKIP_PREFIX,
    Action,
    CallSite,
    FileResult,
    Status,
    is_skipped,
)
from codemods.callers.rewrite import registry
from codemods.catalog.hooks import NONE_ERROR_DSPARK, PP_ERROR_DSPARK
from codemods.deliver.git_branch import DeliveryResult
from codemods.output import site_changes

VALUE_ERROR = f'ValueError("{NONE_ERROR_DSPARK}")'
PP_ERROR = f'NotImplementedError("{PP_ERROR_DSPARK}")'


@dataclass(frozen=True)
class PatchedFile:
    """One file of the upstream patch: its path in the SGLang tree and what changed in it."""

    path: str
    summary: str
    added: bool = False


@dataclass(frozen=True)
class Verification:
    """What was checked on the committed files."""

    #: Files re-parsed with LibCST and compiled with ``compile()``.
    rechecked: tuple[str, ...] = ()
    #: (path, reason) for every file that failed the recheck.
    failures: tuple[tuple[str, str], ...] = ()
    #: Whether running the same command again on the result changes nothing; None: not run.
    idempotent: bool | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and self.idempotent is not False


# --------------------------------------------------------------------------- helpers


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, newlines flattened."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _code(text: object) -> str:
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if "`" in value else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def relative_path(path: str, root: Path | None) -> str:
    """``path`` relative to the repository root when it lies inside it, as POSIX."""
    if root is None:
        return Path(path).as_posix()
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def _changed(results: Sequence[FileResult]) -> list[FileResult]:
    return [result for result in results if result.status is Status.CHANGED]


def _changed_sites(result: FileResult) -> list[CallSite]:
    return [
        site
        for site in result.call_sites
        if any(action in registry.ACTIONS for action in site.actions)
    ]


def _review_sites(results: Sequence[FileResult]) -> list[CallSite]:
    return [
        site for result in results for site in result.call_sites if Action.REVIEW in site.actions
    ]


def _why_rewritten(site: CallSite) -> str:
    """Why a rewritten call site was rewritten, from its risks and note."""
    required = None
    if site.note.startswith(REQUIRED_PREFIX):
        required = site.note[len(REQUIRED_PREFIX) :].split("; unset ids")[0]
    ids = _code(site.ids_source or "the ids")
    reasons = [
        metadata.why_rewritten(ids, required)
        for metadata in registry.CODEMODS
        if metadata.action in site.actions
    ]
    return "; ".join(reasons) or "-"


def _why_not_rewritten(site: CallSite) -> str:
    """Why a call site was left as it is (skipped, for review, or nothing to change), from the
    facts the decision was made on (:func:`codemods.output.site_changes.left_alone`)."""
    if is_skipped(site):
        return site.note[len(SKIP_PREFIX) :]
    if Action.REVIEW in site.actions:
        return f"left for review: {site.note}" if site.note else "left for review"
    return site_changes.left_alone(site, _code)


def _unchanged_sites(results: Sequence[FileResult]) -> list[CallSite]:
    return [
        site
        for result in results
        for site in result.call_sites
        if result.status is not Status.CHANGED
        or not any(action in registry.ACTIONS for action in site.actions)
    ]


def _policy_of(policies: Mapping[str, str]):
    """The policy a codemod ran with, from the run's ``{"guard policy": "skip", ...}``."""
    return lambda metadata: policies.get(metadata.policy.label, metadata.policy.default)


def _policy_line(results: Sequence[FileResult], policies: Mapping[str, str]) -> str:
    """The policies the codemods applied at the rewritten call sites (a policy no site got is
    not named; one applied only where the code needs the capture says so), and the added
    hooks."""
    sites = [site for result in _changed(results) for site in _changed_sites(result)]
    parts = []
    for metadata in registry.CODEMODS:
        label = metadata.policy.label
        applied = site_changes.applied_policies(sites, _policy_of(policies)).get(label, [])
        run = policies.get(label, metadata.policy.default)
        words = [run] if run in applied else []
        words += [f"{name} where the code needs the capture" for name in applied if name != run]
        if words:
            parts.append(f"{label}: {', '.join(words)}")
    parts += [
        f"{name}: {value}"
        for name, value in policies.items()
        if name not in registry.policy_labels()
    ]
    return ", ".join(parts)


#: More changed files than this: the re-check names their folders instead.
RECHECK_MAX_FILES = 8


def recheck_command(
    results: Sequence[FileResult], policies: Mapping[str, str], root: Path | None = None
) -> str:
    """``auxcap migrate --check`` over the changed files (their folders when there are many),
    with the policies that differ from the defaults and the added hooks: run from the
    repository root, it exits 0 once the change is in."""
    words = ["auxcap", "migrate", "--check"]
    for metadata in registry.CODEMODS:
        value = policies.get(metadata.policy.label)
        if value is not None and value != metadata.policy.default:
            words += [metadata.policy.flag, value]
    extra = policies.get("extra hooks", "")
    for name in filter(None, (part.strip() for part in extra.split(","))):
        words += ["--hook", name]
    paths = [relative_path(result.path, root) for result in _changed(results)]
    if len(paths) > RECHECK_MAX_FILES:
        paths = sorted({str(Path(path).parent.as_posix()) for path in paths})
    return " ".join(words + [shlex.quote(path) for path in paths or ["."]])


def _site_changes(site: CallSite, policies: Mapping[str, str], code=str) -> str:
    return "; ".join(item.text for item in site_changes.changes(site, _policy_of(policies), code))


# --------------------------------------------------------------------------- migrate


def migrate_commit_message(
    results: Sequence[FileResult], policies: Mapping[str, str], root: Path | None = None
) -> str:
    """Title, then what was done at each rewritten call site (from its recorded actions and
    the policy applied there), the sites left for review, and how to re-check; a one-site
    change gets a body of a few lines."""
    changed = _changed(results)
    sites = sum(len(_changed_sites(result)) for result in changed)
    title = (
        f"Guard aux hidden-state capture calls ({_plural(sites, 'call site')} "
        f"in {_plural(len(changed), 'file')})"
    )
    policy_line = _policy_line(results, policies)
    lines = [title, ""]
    lines += _wrapped(
        "Rewritten by `auxcap migrate`" + (f" ({policy_line}):" if policy_line else ":"), ""
    )
    for result in changed:
        path = relative_path(result.path, root)
        for site in _changed_sites(result):
            lines += _wrapped(f"{path}:{site.line} {_site_changes(site, policies)}", "  ")
    review = _review_sites(results)
    if review:
        lines += ["", f"Left for review ({_plural(len(review), 'call site')}):"]
        for site in review:
            lines += _wrapped(f"{relative_path(site.path, root)}:{site.line} {site.hook}", "  ")
    lines += ["", "Re-check:", *_wrapped(recheck_command(results, policies, root), "  ")]
    return "\n".join(lines) + "\n"


def _wrapped(text: str, indent: str) -> list[str]:
    """``text`` as commit-body lines of at most 72 columns (words never split)."""
    return textwrap.wrap(
        text,
        72,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _verification_section(verification: Verification, command: str) -> list[str]:
    lines = ["## How it was verified", ""]
    if verification.rechecked:
        if verification.failures:
            checked = _plural(len(verification.rechecked), "file")
            failed = _plural(len(verification.failures), "file")
            lines.append(f"- Re-parsed (LibCST) and compiled {checked}; **{failed} failed**:")
            lines += [f"  - `{path}`: {_cell(reason)}" for path, reason in verification.failures]
        else:
            lines.append(
                f"- Every rewritten file ({_plural(len(verification.rechecked), 'file')}) was "
                f"re-parsed with LibCST and compiled with `compile()` after the rewrite."
            )
    else:
        lines.append("- No rewritten file to re-parse and compile.")
    if verification.idempotent is True:
        lines.append(f"- Idempotent: running `{command}` again on this branch changes nothing.")
    elif verification.idempotent is False:
        lines.append(f"- **Not idempotent**: running `{command}` again would change files again.")
    else:
        lines.append("- Idempotence was not checked.")
    return lines


def _revert_section(delivery: DeliveryResult) -> list[str]:
    sha = delivery.commit[:12] if delivery.commit else "<sha>"
    return [
        "## How to revert",
        "",
        f"- After merging: `git revert {sha}` (one commit, nothing else depends on it).",
        f"- Before merging: delete the branch, `git branch -D {delivery.branch}`, and, if pushed, "
        f"`git push {delivery.remote} --delete {delivery.branch}`.",
    ]


def migrate_pr_body(
    results: Sequence[FileResult],
    delivery: DeliveryResult,
    policies: Mapping[str, str],
    verification: Verification,
) -> str:
    """Markdown PR description for a ``migrate`` commit: per rewritten call site what was done
    and why (a list for one site, a table for more), what a reviewer checks for the changes
    made, what was not rewritten and why, how to re-check, verify and revert.  Built from the
    records of what was done: nothing is said about a policy no site got."""
    root = delivery.repo_root
    changed = _changed(results)
    rows = [
        (relative_path(result.path, root), site)
        for result in changed
        for site in _changed_sites(result)
    ]
    commit = _code(delivery.commit[:12] if delivery.commit else "-")
    out = ["# Guard aux hidden-state capture calls", ""]
    if len(rows) == 1:
        path, site = rows[0]
        out += [
            f"`auxcap migrate` changed one call site (commit {commit}):",
            "",
            f"- `{path}:{site.line}`: {_site_changes(site, policies, _code)}. "
            f"Why: {_why_rewritten(site)}.",
        ]
    else:
        out += [
            f"`auxcap migrate` changed {_plural(len(rows), 'call site')} in "
            f"{_plural(len(changed), 'file')} (commit {commit}):",
            "",
            "| File | Line | Change | Why |",
            "| --- | ---: | --- | --- |",
        ]
        out += [
            f"| `{_cell(path)}` | {site.line} | {_cell(_site_changes(site, policies, _code))} | "
            f"{_cell(_why_rewritten(site))} |"
            for path, site in rows
        ] or ["| - | - | - | - |"]
    reviews = site_changes.reviews((site for _, site in rows), _policy_of(policies))
    if reviews:
        out += ["", "Review: " + reviews[0] + "." if len(reviews) == 1 else "Review:"]
        if len(reviews) > 1:
            out += [f"- {text}." for text in reviews]
    review = _review_sites(results)
    if review:
        out += ["", "### Left for review (not rewritten)", ""]
        out += [
            f"- `{relative_path(site.path, root)}:{site.line}` `{site.hook}`"
            + (f": {site.note}" if site.note else "")
            for site in review
        ]
    unchanged = [site for site in _unchanged_sites(results) if Action.REVIEW not in site.actions]
    if unchanged:
        out += ["", "### Not rewritten, and why", ""]
        out += [
            f"- `{relative_path(site.path, root)}:{site.line}` `{site.hook}`: "
            f"{_why_not_rewritten(site)}"
            for site in unchanged
        ]
    policy_line = _policy_line(results, policies)
    out += [
        "",
        f"Re-check from the repository root: `{recheck_command(results, policies, root)}` "
        "(exit 0: nothing left to change)." + (f" Policies: {policy_line}." if policy_line else ""),
        "",
    ]
    out += _verification_section(verification, "auxcap migrate --check")
    out += [""]
    out += _revert_section(delivery)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- upstream-patch


UPSTREAM_TITLE = "Support aux hidden-state capture under pipeline parallelism"


def upstream_commit_message(
    patched: Sequence[PatchedFile], detail: str = "", title: str = UPSTREAM_TITLE
) -> str:
    """Title + body listing the SGLang files the upstream patch adds or changes: for a
    patch given without the generator's result, so it quotes nothing of the release (the
    generated patch's message is :mod:`codemods.upstream.output.branch_message`)."""
    lines = [
        title,
        "",
        "Aux hidden states are captured on the stage that owns each layer and passed",
        "to the last stage.",
    ]
    if detail:
        lines += ["", detail.rstrip()]
    lines += ["", "Files:"]
    lines += [f"  {'A' if item.added else 'M'} {item.path}: {item.summary}" for item in patched]
    return "\n".join(lines) + "\n"


def upstream_pr_body(
    patched: Sequence[PatchedFile],
    delivery: DeliveryResult,
    verification: Verification,
    detail: str = "",
    description: str | None = None,
) -> str:
    """Markdown PR description for an ``upstream-patch`` commit.

    ``description``: the patch generator's own description (motivation, design, test plan);
    when given it replaces the short "what and why" written here.
    """
    if description:
        out = [description.rstrip()]
    else:
        out = [
            "# Support aux hidden-state capture under pipeline parallelism",
            "",
            "## What changed and why",
            "",
            "This change captures the aux hidden states on the stage that owns each requested "
            "layer and hands them to the last stage, so speculative decoding with aux "
            "capture runs under pipeline parallelism.",
        ]
    if detail and not description:
        out += ["", detail.rstrip()]
    commit = _code(delivery.commit[:12] if delivery.commit else "-")
    out += [
        "",
        "## Patched files",
        "",
        f"In commit {commit} on branch `{delivery.branch}`:",
        "",
        "| File | Change |",
        "| --- | --- |",
    ]
    for item in patched:
        kind = "added: " if item.added else ""
        out.append(f"| `{_cell(item.path)}` | {kind}{_cell(item.summary)} |")
    out += [""]
    out += _verification_section(verification, "auxcap upstream-patch")
    out += [""]
    out += _revert_section(delivery)
    return "\n".join(out) + "\n"
