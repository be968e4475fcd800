"""Reports of the capture-hook family: a JSON-able survey and Markdown tables.

``survey(plan)`` lists, for every model file with a capture hook, its hooks, which of them
return early off the last PP rank, the decoder-stack forward that does the capturing and
how it captures, and whether the family patch rewrites the file (and why not).
``markdown_table`` renders the same for the README and the pull-request description.
"""

from __future__ import annotations

from typing import Any

from codemods.upstream.family import FamilyPlan

#: How each capture kind is described in tables.
CAPTURE_KINDS = {
    "loop-append": "appended in the layer loop",
    "layer-kwarg": "handed to the layer (`captured_last_layer_outputs`)",
    "layer-flag": "layer flag `_is_layer_to_capture`",
}


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
                "cases": [
                    {"class": outer, "stack": stack, "hooks": list(hooks)}
                    for outer, stack, hooks in decision.cases
                ],
            }
        )
    return records


def _hook_names(qualified: tuple[str, ...]) -> str:
    names = dict.fromkeys(name.split(".", 1)[1] for name in qualified)
    return ", ".join(f"`{name.removeprefix('set_').removesuffix('_layers_to_capture')}`"
                     for name in names)


def markdown_table(plan: FamilyPlan, validated: dict[str, str] | None = None) -> str:
    """Markdown table: file, hooks, early return, patched (or why not), validated.

    ``validated`` maps file stems to a short description of the validation that passed
    (e.g. "2+3 stages, relay+direct"); files missing from it show "no".
    """
    validated = validated or {}
    rows = [
        "| model file | hooks | returns early off the last rank | patched | validated |",
        "|---|---|---|---|---|",
    ]
    for decision in sorted(plan.decisions.values(), key=lambda d: d.file):
        early = _hook_names(decision.early_return) if decision.early_return else "no"
        if decision.patched:
            kinds = "; ".join(CAPTURE_KINDS.get(k, k) for k in decision.capture_kinds)
            patched = f"yes ({kinds}; forward `{decision.forward}`)"
        else:
            patched = "no: " + decision.reason.replace("|", "\\|")
        check = validated.get(decision.name, "no") if decision.patched else "-"
        rows.append(
            f"| `{decision.file}` | {_hook_names(decision.hooks) or '-'} | {early} | "
            f"{patched} | {check} |"
        )
    return "\n".join(rows) + "\n"


def coverage_line(plan: FamilyPlan) -> str:
    with_early = [d for d in plan.decisions.values() if d.early_return]
    patched = [d for d in with_early if d.patched]
    return (
        f"{len(patched)} of {len(with_early)} model files whose hooks return early on "
        f"non-last PP ranks are patched ({len(plan.decisions)} files define a hook)."
    )
