"""Reports of the capture-hook family: a JSON-able survey and Markdown tables.

``survey(plan)`` lists, for every model file with a capture hook, its hooks, which of them
return early off the last PP rank, the decoder-stack forward that does the capturing and
how it captures, and whether the family patch rewrites the file (and why not).
``markdown_table`` renders the same for the README and the pull-request description.
"""

from __future__ import annotations

from typing import Any

from codemods.upstream.family import FamilyPlan
from codemods.upstream.family_entry import (
    ENTRY_DESCRIPTION,
    ENTRY_HANDOFF,
    ENTRY_KIND,
    ENTRY_PROXY_ARG,
    GATHERED_DESCRIPTION,
    GATHERED_KIND,
    SNAPSHOT_KIND,
)
from codemods.upstream.family_entry_gated import GATED_DESCRIPTION, GATED_KIND
from codemods.upstream.family_snapshot import SNAPSHOT_DESCRIPTION

#: How each capture kind is described in tables.
CAPTURE_KINDS = {
    "loop-append": "appended in the layer loop",
    "after-layer": "appended after the layer call, raw layer ids",
    "layer-kwarg": "handed to the layer (`captured_last_layer_outputs`)",
    "layer-flag": "layer flag `_is_layer_to_capture`",
    "boundaries": "layer boundaries (`start_layer`, then `i + 1` after layer `i`)",
    ENTRY_KIND: ENTRY_DESCRIPTION,
    GATHERED_KIND: GATHERED_DESCRIPTION,
    SNAPSHOT_KIND: SNAPSHOT_DESCRIPTION,
    GATED_KIND: GATED_DESCRIPTION,
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
                "other_fixes": list(decision.fixes),
                "stale_comments": list(decision.stale_comments),
                "handoff": _handoff(decision.proxy_arg),
                "last_stage_captures_output": decision.final_capture,
                "cases": [
                    {"class": outer, "stack": stack, "hooks": list(hooks)}
                    for outer, stack, hooks in decision.cases
                ],
            }
        )
    return records


def _handoff(proxy_arg: str | None) -> str | None:
    """How the forward hands its stage output on: ``PPProxyTensors({...})`` (a dict
    literal), ``PPProxyTensors(name)`` or ``residual_batch.to_pp(...)``."""
    if proxy_arg is None:
        return None
    if proxy_arg == ENTRY_PROXY_ARG:
        return ENTRY_HANDOFF
    return f"PPProxyTensors({'{...}' if proxy_arg == 'dict' else 'name'})"


def _hook_names(qualified: tuple[str, ...]) -> str:
    names = dict.fromkeys(name.split(".", 1)[1] for name in qualified)
    return ", ".join(f"`{name.removeprefix('set_').removesuffix('_layers_to_capture')}`"
                     for name in names)


def markdown_table(plan: FamilyPlan, validated: dict[str, str] | None = None,
                   not_validated: str = "no") -> str:
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
            kinds = "; ".join(CAPTURE_KINDS.get(k, k) for k in decision.capture_kinds)
            also = "".join(f"; also {fix}" for fix in decision.fixes)
            patched = f"yes ({kinds}; forward `{decision.forward}`{also})"
        else:
            patched = "no: " + decision.reason.replace("|", "\\|")
        check = validated.get(decision.name, not_validated) if decision.patched else "-"
        rows.append(
            f"| `{decision.file}` | {_hook_names(decision.hooks) or '-'} | {early} | "
            f"{patched} | {check} |"
        )
    return "\n".join(rows) + "\n"


#: The reason of a file whose model refuses PP outright (it loses nothing under PP).
REFUSES_PP = "the model refuses PP in its constructor"


def coverage_line(plan: FamilyPlan) -> str:
    with_early = [d for d in plan.decisions.values() if d.early_return]
    patched = [d for d in with_early if d.patched]
    refusing = [d for d in with_early if d.reason.startswith(REFUSES_PP)]
    line = (
        f"{len(patched)} of {len(with_early)} model files whose hooks return early on "
        f"non-last PP ranks are patched ({len(plan.decisions)} files define a hook)."
    )
    if refusing:
        names = ", ".join(f"`{d.file}`" for d in sorted(refusing, key=lambda d: d.file))
        line += (
            f" {len(refusing)} of the others ({names}) refuse PP in their constructor, "
            f"so their early return never runs."
        )
    return line


#: The validated column of a model nothing was run for in this invocation.
NOT_RUN = "not run (see Test plan)"


def pr_section(plan: FamilyPlan | None, test_cmd: str,
               validated: dict[str, str] | None = None) -> str:
    """The pull-request section on the capture-hook family ("" when not patched).

    ``validated``: models (file stems) a run of this invocation validated, with what
    was run; every other patched model shows :data:`NOT_RUN`."""
    if plan is None or not plan.patched:
        return ""
    patched = [d for d in sorted(plan.decisions.values(), key=lambda d: d.file) if d.patched]
    files = ", ".join(f"`{d.file}`" for d in patched)
    fixes = [(d.file, fix) for d in patched for fix in d.fixes]
    fix_lines = "".join(f"- `{file}`: {fix}.\n" for file, fix in fixes)
    fix_section = (
        f"\nThe patch also fixes what kept some of these models from capturing at all:\n\n"
        f"{fix_lines}"
        if fixes
        else ""
    )
    stale = [(d.file, c) for d in patched for c in d.stale_comments]
    stale_section = (
        "\nComments that still tie capture to the last stage (the code no longer does; "
        "please reword or drop them in review):\n\n"
        + "".join(f"- `{file}`: `{comment}`\n" for file, comment in stale)
        if stale
        else ""
    )
    return f"""\
## Models whose capture hooks returned early off the last rank

{len(patched)} more model files ({files}) define their capture hooks
(`set_eagle3_layers_to_capture`, `set_dflash_layers_to_capture`,
`set_dspark_layers_to_capture`) as `if not self.pp_group.is_last_rank: return`, so under
PP only the last stage captured: the drafter silently got fewer aux states than it was
trained on, or the last stage failed unpacking `(hidden_states, aux_hidden_states)` when
it owned none of the capture layers.  Each hook now stores the ids on every rank and
attaches the same transport (`attach_pp_aux_transport`, new
`sglang/srt/distributed/pp_aux_capture.py`); the decoder-stack forward adds its captures
to the `PPProxyTensors` handoff (`pp_aux_outgoing`) and the last stage gathers all of them
(`pp_aux_collect`).  Where a forward captures only under a condition (DSpark targets:
`capture_aux and ... and hidden_states.shape[0] != 0`), the condition drops its
last-rank operand and the handoff and the gathering run under the same condition, which
holds on every stage or on none.  Ids, default layers (EAGLE3's `None` ->
`[2, n // 2, n - 3]`), order (ascending layer id) and capture point (at the start of layer
`i`, or after it for raw DSpark ids) are each model's own; with PP=1 nothing changes.
`SGLANG_PP_AUX_TRANSPORT=relay|direct` selects the mode at run time.
{fix_section}{stale_section}
{coverage_line(plan)}

{markdown_table(plan, validated, NOT_RUN)}
Test: `{test_cmd}` (CPU, gloo, 2 and 3 stages, relay and direct, including an empty
microbatch; every model's real hooks and forward with stand-in decoder layers, compared
with PP=1 via `torch.equal`).

"""
