"""Reports of the capture-hook family: a JSON-able survey and Markdown tables.

``survey(plan)`` lists, for every model file with a capture hook, its hooks, which of them
return early off the last PP rank, the decoder-stack forward that does the capturing and
how it captures, and whether the family patch rewrites the file (and why not).
``markdown_table`` renders the same for ``docs/models.md`` (the pull-request description
lists the patched files by family instead, ``pr_body.py``).
"""

from __future__ import annotations

from typing import Any

from codemods.upstream.family import registry
from codemods.upstream.family.plan import REFUSES_PP, FamilyPlan


def survey(plan: FamilyPlan) -> list[dict[str, Any]]:
    """One record per model file with a capture hook, sorted by file name."""
    records = []
    for decision in sorted(plan.decisions.values(), key=lambda d: d.file):
        records.append(
            {
                "file": decision.file,
                "hooks": list(decision.hooks),
                "early_return": list(decision.early_return),
                "patched": decision.patched,
                "reason": decision.reason,
                "capture_forward": str(decision.forward) if decision.forward else None,
                "capture_kinds": list(decision.capture_kinds),
                "other_fixes": list(decision.fixes),
                "stale_comments": list(decision.stale_comments),
                "dead_returns_dropped": list(decision.dead_returns),
                "inherits_hooks_of": decision.inherits,
                "handoff": registry.handoff(decision.proxy_arg),
                "last_stage_captures_output": decision.final_capture,
                "cases": [
                    {"class": outer, "stack": stack, "hooks": list(hooks)}
                    for outer, stack, hooks in decision.cases
                ],
            }
        )
    return records


def _hook_names(qualified: tuple[str, ...]) -> str:
    names = dict.fromkeys(name.split(".", 1)[1] for name in qualified)
    return ", ".join(
        f"`{name.removeprefix('set_').removesuffix('_layers_to_capture')}`" for name in names
    )


def markdown_table(
    plan: FamilyPlan, validated: dict[str, str] | None = None, not_validated: str = "no"
) -> str:
    """Markdown table: file, hooks, early return, patched (or why not), validated.

    ``validated`` maps file stems to a short description of the validation that passed
    (e.g. "2+3 stages, relay+direct"); files missing from it show ``not_validated``.
    """
    validated = validated or {}
    rows = [
        "| model file | hooks | returns early off the last rank | patched | validated |",
        "|---|---|---|---|---|",
    ]
    for decision in sorted(plan.decisions.values(), key=lambda d: d.file):
        early = _hook_names(decision.early_return) if decision.early_return else "no"
        if decision.patched:
            kinds = "; ".join(map(registry.describe, decision.capture_kinds))
            also = "".join(f"; also {fix}" for fix in decision.fixes)
            if decision.inherits:
                also += f"; its class inherits the hooks of `{decision.inherits}`"
            patched = f"yes ({kinds}; forward `{decision.forward}`{also})"
        else:
            patched = "no: " + decision.reason.replace("|", "\\|")
        check = validated.get(decision.name, not_validated) if decision.patched else "-"
        rows.append(
            f"| `{decision.file}` | {_hook_names(decision.hooks) or '-'} | {early} | "
            f"{patched} | {check} |"
        )
    return "\n".join(rows) + "\n"


def coverage_line(plan: FamilyPlan) -> str:
    with_early = [d for d in plan.decisions.values() if d.early_return]
    patched = [d for d in with_early if d.patched]
    refusing = [d for d in with_early if d.reason.startswith(REFUSES_PP)]
    hooked = [d for d in plan.decisions.values() if d.hooks]
    line = (
        f"{len(patched)} of {len(with_early)} model files whose hooks return early on "
        f"non-last PP ranks are patched ({len(hooked)} files define a hook)."
    )
    if refusing:
        names = ", ".join(f"`{d.file}`" for d in sorted(refusing, key=lambda d: d.file))
        dropped = all(d.dead_returns for d in refusing)
        line += (
            f" {len(refusing)} of the others ({names}) refuse PP in their constructor, "
            "so their early return never runs"
            + ("; the patch drops it and declares no relay for them." if dropped else ".")
        )
    return line
