"""The texts of ``upstream-patch --stack DIR``: each PR's ``PR.md`` and the stack's index.

A PR's description follows SGLang's pull-request template (the sections of
:data:`codemods.upstream.output.pr_body.SECTIONS`) and names only its own files and
commits, the PRs it depends on and the one it is stacked on.  Its Accuracy Tests say
which of its Python files compile as the PR leaves them (``compile()`` on the text after
the PR, when the stack is written) and how to run the tests it ships.  The index
(``STACK.md``) lists the PRs in merge order with what each depends on and its changed
lines, outside tests and in tests.
"""

from __future__ import annotations

from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.output.pr_body import CHECKLIST
from codemods.upstream.output.result_facts import test_command
from codemods.upstream.output.stack import (
    DEAD,
    FAMILY,
    FIXES,
    GUARD,
    HELPERS,
    MAX_LINES,
    StackPR,
    changed_lines,
    is_test,
)
from codemods.upstream.result import UpstreamResult

INDEX = "STACK.md"
BODY = "PR.md"
#: Shipped tests a reviewer runs.
RUNNABLE = (Role.FAMILY_TEST, Role.INIT_TEST, Role.RELAY_TEST)


def _ref(name: str) -> str:
    return f"#{name}"


def _motivation(pr: StackPR, prs: list[StackPR]) -> str:
    helpers = next((p.name for p in prs if p.kind == HELPERS), None)
    through = f" through the helpers of {_ref(helpers)}" if helpers else ""
    if pr.kind == HELPERS:
        text = (
            "Speculative decoding with aux hidden-state capture needs, on the last pipeline "
            "stage, the hidden states captured on every stage. This PR adds the helpers "
            "that carry them in the PP handoff; the model PRs later in this stack call them."
        )
        if any(path.endswith(("/kimi_linear.py", "/kimi_k3.py")) for path in pr.paths):
            text += " The Kimi model files changed here use them already in this PR."
        return text
    if pr.kind == GUARD:
        return (
            "With pipeline parallelism, a model class whose forward does not relay the aux "
            "captures would lose those of the stages before the last. This PR makes the "
            "configuration of the capture refuse such a class instead, naming it."
        )
    if pr.kind == FIXES:
        return (
            "A separate fix, not about aux capture under PP. The capture PR of this file "
            "later in the stack builds on it."
        )
    if pr.kind == FAMILY:
        return (
            "With pipeline parallelism, these model files do not bring the aux hidden "
            "states captured on the stages before the last to the last one. This PR "
            f"carries the captures of every stage to the last one{through}."
        )
    if pr.kind == DEAD:
        return (
            "These model files refuse PP in their constructor, so the early return off "
            "the last rank in their capture hooks never runs. This PR only drops it."
        )
    return (
        "The server's PP validation comes last in this stack: it is changed once the "
        "models it names relay their captures (the PRs it depends on)."
    )


def _after(pr: StackPR) -> dict[str, str]:
    """Each path of ``pr`` -> its text as the PR leaves it."""
    return {change.path: change.new for change in pr.changes}


def compile_failures(pr: StackPR) -> list[str]:
    """The Python files of ``pr`` that do not compile as it leaves them."""
    failed = []
    for path, text in _after(pr).items():
        if not path.endswith(".py"):
            continue
        try:
            compile(text, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            failed.append(path)
    return failed


def _files(pr: StackPR) -> list[str]:
    counts: dict[str, int] = {}
    tests: set[str] = set()
    for change in pr.changes:
        counts[change.path] = counts.get(change.path, 0) + changed_lines(change)
        if is_test(change):
            tests.add(change.path)
    return [
        f"- `{path}`: {lines} changed line{'s' if lines != 1 else ''}"
        + (" (test)" if path in tests else "")
        for path, lines in counts.items()
    ]


def _modifications(pr: StackPR) -> str:
    lines = ["Files:", *_files(pr), "", f"Commits ({len(pr.commits)}):", ""]
    for number, commit in enumerate(pr.commits, start=1):
        lines += [f"{number}. {commit.subject}", "", "```text", commit.body.rstrip(), "```", ""]
    return "\n".join(lines)


def _accuracy(pr: StackPR, result: UpstreamResult) -> str:
    python = [path for path in _after(pr) if path.endswith(".py")]
    failed = compile_failures(pr)
    lines = []
    if python and not failed:
        lines.append(
            f"Each of the {len(python)} Python files this PR changes compiles as the PR "
            "leaves it (checked with `compile()` when the stack was written)."
        )
    elif failed:
        lines.append(f"Does not compile as this PR leaves it: {', '.join(failed)}.")
    tests = [c.path for c in pr.changes if c.role in RUNNABLE]
    if tests:
        lines += ["", "Not run by the generator. The CPU tests this PR adds or extends:", ""]
        lines += ["```bash", *[test_command(result, path) for path in tests], "```"]
    else:
        lines.append("This PR ships no test of its own.")
    return "\n".join(lines) + "\n"


def render_pr(pr: StackPR, prs: list[StackPR], result: UpstreamResult) -> str:
    """``PR.md`` of ``pr`` (one of ``prs``, the whole stack)."""
    index = prs.index(pr)
    depends = (
        f"Depends on {', '.join(map(_ref, pr.depends))}."
        if pr.depends
        else "Depends on no other PR of this stack."
    )
    if index and prs[index - 1].name not in pr.depends:
        depends += f" Stacked on {_ref(prs[index - 1].name)}: it applies on top of it."
    ticked = any(c.role in RUNNABLE for c in pr.changes)
    checklist = "".join(
        f"- [{'x' if item == 'Add unit tests' and ticked else ' '}] {item}\n" for item in CHECKLIST
    )
    return (
        f"# {pr.title}\n\n"
        f"{depends}\n\n"
        f"## Motivation\n\n{_motivation(pr, prs)}\n\n"
        f"## Modifications\n\n{_modifications(pr)}\n"
        f"## Accuracy Tests\n\n{_accuracy(pr, result)}\n"
        "## Benchmarking and Profiling\n\nNot run: no GPU was used to write this stack.\n\n"
        f"## Checklist\n\n{checklist}"
    )


def render_index(prs: list[StackPR], result: UpstreamResult, limit: int = MAX_LINES) -> str:
    """``STACK.md``: the PRs in merge order, what each depends on, their changed lines."""
    over = [pr.name for pr in prs if pr.code_lines > limit]
    rows = [
        f"| {n} | `{pr.name}` | {pr.title} | "
        f"{', '.join(f'`{d}`' for d in pr.depends) or '-'} | "
        f"{pr.code_lines} | {pr.test_lines} | {len(pr.paths)} |"
        for n, pr in enumerate(prs, start=1)
    ]
    limit_line = (
        f"Every PR changes at most {limit} lines outside tests."
        if not over
        else f"Over {limit} changed lines outside tests (one file each): {', '.join(over)}."
    )
    return (
        f"# Stack of {len(prs)} PRs for {result.tree.describe()}\n\n"
        "Merge order. Each folder holds its PR's commits as `git format-patch` files and "
        f"its description (`{BODY}`). Each PR applies on the one before it (`git am -k` "
        "its patches in file order); applied in order, the stack leaves every file as the "
        "single patch does. Changed lines are lines added plus lines removed.\n\n"
        f"{limit_line}\n\n"
        "| # | PR | Title | Depends on | Changed lines outside tests | Changed test lines "
        "| Files |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )


__all__ = ["BODY", "INDEX", "compile_failures", "render_index", "render_pr"]
