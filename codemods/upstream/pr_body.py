"""The Markdown pull-request description that goes with the upstream patch.

Sections: title, motivation (the two errors users hit), design, bytes on the wire (relay vs
direct, computed analytically from the transport's own partition rule), test plan, and the
files the patch touches.  The traffic table is computed, not written by hand: for every
captured layer, relay moves it ``P - 1 - owner`` hops, direct moves it one hop (none when the
last stage owns it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from codemods.upstream import kimi, kimi_k3, names
from codemods.upstream.family_report import pr_section
from codemods.upstream.generate import UpstreamResult
from codemods.upstream.graph_sizing import has_dspark_sizing
from codemods.upstream.pp_aux_plan import MODES, AuxCapturePlan
from codemods.upstream.validation import TABLE_NAME as VALIDATION_TABLE

#: Example used for the traffic table: a 27-layer model with hidden size 2304 in bf16,
#: capturing three layers spread over the depth.
EXAMPLE_LAYERS = 27
EXAMPLE_HIDDEN = 2304
EXAMPLE_CAPTURE = (2, 13, 24)
EXAMPLE_DTYPE_BYTES = 2
EXAMPLE_TOKENS = (1, 8192)
EXAMPLE_PP = (2, 3, 4)


@dataclass(frozen=True)
class Traffic:
    """Aux traffic of one forward, per token: messages and bytes."""

    pp_size: int
    mode: str
    transfers: int  # point-to-point tensor transfers (one per capture per hop)
    bytes_per_token: int  # summed over all links
    bytes_into_last_per_token: int  # arriving at the last rank (handoff + direct)
    max_link_bytes_per_token: int  # busiest single link


def traffic(layer_ids: Sequence[int], num_layers: int, hidden: int, dtype_bytes: int,
            pp_size: int, mode: str) -> Traffic:
    """Analytic aux traffic of one forward under the transport's partition rule."""
    plan = AuxCapturePlan.build(list(layer_ids), num_layers, 0, pp_size, mode=mode)
    per = hidden * dtype_bytes
    links: dict[tuple[int, int], int] = {}
    transfers = 0
    into_last = 0
    last = pp_size - 1
    for layer_id in plan.layer_ids:
        owner = plan.owner_of(layer_id)
        if owner == last:
            continue
        if plan.sends_direct(owner):
            hops = [(owner, last)]
        else:
            hops = [(stage, stage + 1) for stage in range(owner, last)]
        for link in hops:
            links[link] = links.get(link, 0) + per
        transfers += len(hops)
        into_last += per
    return Traffic(pp_size, mode, transfers, sum(links.values()), into_last,
                   max(links.values(), default=0))


def _fmt_bytes(count: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def traffic_table() -> str:
    head_tokens = " | ".join(
        f"bytes, {t} token{'s' if t > 1 else ''}" for t in EXAMPLE_TOKENS
    )
    rows = [
        f"| PP | mode | transfers | {head_tokens} | into last rank | busiest link |",
        "|---|---|---|" + "---|" * len(EXAMPLE_TOKENS) + "---|---|",
    ]
    for pp_size in EXAMPLE_PP:
        for mode in MODES:
            t = traffic(EXAMPLE_CAPTURE, EXAMPLE_LAYERS, EXAMPLE_HIDDEN, EXAMPLE_DTYPE_BYTES,
                        pp_size, mode)
            sizes = " | ".join(_fmt_bytes(t.bytes_per_token * n) for n in EXAMPLE_TOKENS)
            rows.append(
                f"| {pp_size} | {mode} | {t.transfers} | {sizes} | "
                f"{_fmt_bytes(t.bytes_into_last_per_token * EXAMPLE_TOKENS[-1])} | "
                f"{_fmt_bytes(t.max_link_bytes_per_token * EXAMPLE_TOKENS[-1])} |"
            )
    return "\n".join(rows)


SIZING_FILE = "model_executor/runner_utils/buffers.py"
PREFILL_RUNNER = "model_executor/runner/prefill_cuda_graph_runner.py"

_SIZING = """## CUDA graphs

CUDA graph runners preallocate the `PPProxyTensors` buffers of non-first stages, one per
key. The aux entry `aux_hidden_states` gets its buffer along the path that sizes
`dspark_hidden_states`: each patched model answers `get_pp_proxy_aux_hidden_size()` (the
width its stage receives, from the capture plan; 0 on PP=1 and on the first stage), read
through `ModelRunner.get_pp_proxy_aux_hidden_size` and
`misc_utils.resolve_pp_proxy_aux_hidden_size` into `allocate_pp_proxy_tensors` of both
graph runners.
"""
_LEGACY_SIZING = (
    "CUDA graph runners preallocate the `PPProxyTensors` buffers of non-first stages, one "
    "per key; this release sizes `hidden_states`/`residual` (and `topk_indices`) only. The "
    "patch adds a path for the aux entry `aux_hidden_states` next to the residual bank's: "
    "each patched model answers `get_pp_proxy_aux_hidden_size()` (the width its stage "
    "receives, from the capture plan; 0 on PP=1 and on the first stage), read through "
    "`ModelRunner.get_pp_proxy_aux_hidden_size` and "
    "`misc_utils.resolve_pp_proxy_aux_hidden_size` into the `aux_hidden_states` buffer of "
    "{runners}. The decode runner's pre-planned `load_batch` branch (the plan-stream load "
    "already ran, without the proxy) refreshed no proxy buffer; it now copies the incoming "
    "proxy tensors into them, as the full load does (so `hidden_states` and `residual` are "
    "no longer left stale there either, as in later releases)."
)
_LIMITATION = """## Known limitation

CUDA-graph runners preallocate the `PPProxyTensors` buffers of non-first stages for
`hidden_states`/`residual` only. Until they also allocate the aux entry, run PP + DSPARK
with CUDA graphs disabled on non-first stages; with graphs enabled the last stage fails
loudly (`RuntimeError` naming the missing layers) rather than returning fewer features.
"""


def cuda_graphs(result: UpstreamResult) -> str:
    """The CUDA graph section: how the aux entry gets its graph buffers (along SGLang's
    DSPARK sizing path, or along the path the patch adds on a tree without one), or, on a
    tree whose buffers the patch does not size, the limitation that remains."""
    changed = result.changed
    if not any(path.endswith(SIZING_FILE) for path in changed):
        return _LIMITATION
    if has_dspark_sizing(result.tree):
        return _SIZING
    runners = (
        "the decode and prefill graph runners"
        if any(path.endswith(PREFILL_RUNNER) for path in changed)
        else "the decode graph runner (the prefill one keeps no proxy buffers)"
    )
    text = _LEGACY_SIZING.format(runners=runners)
    return "## CUDA graphs\n\n" + textwrap.fill(text, width=88, break_on_hyphens=False) + "\n"


#: Short names of the capture hooks, as the title lists them.
HOOK_NAMES = {
    "set_eagle3_layers_to_capture": "EAGLE3",
    "set_dflash_layers_to_capture": "DFlash",
    "set_dspark_layers_to_capture": "DSPARK",
}
KIMI_TITLE = "# [PP] Kimi-Linear: carry DSPARK aux hidden states across pipeline stages"
RELAY_TITLE = "# [PP] Kimi-Linear: raise when the DSPARK relay hands on fewer captures"


def kimi_touched(result: UpstreamResult) -> bool:
    return result.model_path in result.changed


def kimi_relay_checked(result: UpstreamResult) -> bool:
    """Kimi-Linear relays DSPARK captures itself (0.5.21+) and only its relay's check of
    the handoff entry is in the patch."""
    return kimi_touched(result) and result.status == kimi.SUPPORTED


def kimi_rewritten(result: UpstreamResult) -> bool:
    """Kimi-Linear's hook and forward are rewritten (0.5.18-0.5.20)."""
    return kimi_touched(result) and not kimi_relay_checked(result)


def k3_touched(result: UpstreamResult) -> bool:
    return result.tree.module_path(kimi_k3.MODULE) in result.changed


def touched_models(result: UpstreamResult) -> list[str]:
    """Every model file the patch rewrites, by stem."""
    names = [kimi.MODULE.rsplit(".", 1)[1]] if kimi_touched(result) else []
    names += [kimi_k3.NAME] if k3_touched(result) else []
    if result.family is not None:
        names += [file.removesuffix(".py") for file in result.family.patched]
    return sorted(dict.fromkeys(names))


def touched_hooks(result: UpstreamResult) -> list[str]:
    """Every capture hook the patch changes."""
    touched = kimi_rewritten(result) or k3_touched(result)
    hooks = ["set_dspark_layers_to_capture"] if touched else []
    if result.family is not None:
        for decision in result.family.decisions.values():
            if decision.patched:
                hooks += [hook for _, _, names in decision.cases for hook in names]
    return sorted(dict.fromkeys(hooks))


VALIDATION_FILE = "arg_groups/validation_hook.py"


def validation_change(result: UpstreamResult):
    """The patch's change to SGLang's server-arg validation (None: it has none)."""
    return next((change for change in result.changes
                 if change.path.endswith(VALIDATION_FILE) and change.changed), None)


def relaxes_aux_flag(result: UpstreamResult) -> bool:
    """The validation change also accepts ``--enable-return-aux-hidden-states`` with PP
    (the release refuses it: 0.5.23)."""
    change = validation_change(result)
    return change is not None and AUX_PP_REFUSAL in (change.old or "")


AUX_FLAG = "--enable-return-aux-hidden-states"
#: How the release refuses the flag with PP (the message of 0.5.23's check).
AUX_PP_REFUSAL = f"{AUX_FLAG} only supports pp_size == 1"


def title_of(result: UpstreamResult) -> str:
    models = touched_models(result)
    if models == [kimi.MODULE.rsplit(".", 1)[1]]:
        return RELAY_TITLE if kimi_relay_checked(result) else KIMI_TITLE
    kinds = "/".join(HOOK_NAMES.get(hook, hook) for hook in touched_hooks(result))
    count = len(models)
    validation = ", and the PP server-arg checks for them" if validation_change(result) else ""
    return (
        f"# [PP] Carry aux hidden states across pipeline stages: {count} "
        f"model{'s' if count != 1 else ''} ({kinds} capture){validation}"
    )


def _motivation(result: UpstreamResult) -> str:
    hooks = ", ".join(f"`{hook}`" for hook in touched_hooks(result))
    models = ", ".join(f"`{name}`" for name in touched_models(result))
    lines = [
        "Speculative decoding (EAGLE3, DFlash, DSPARK) reads aux hidden states captured "
        "after a few\ntarget layers.  With pipeline parallelism those layers live on "
        "different stages.  This patch\ntouches the models "
        f"{models}\nand the hooks {hooks}, because:\n",
    ]
    if kimi_relay_checked(result):
        lines.append(f"""
- `kimi_linear.py` relays DSPARK captures across stages itself (`{RELAY_ENTRY}`), but
  a receiving stage whose handoff lacks that entry, or carries it at another width (another
  capture count), goes on with fewer captures and no error.
""")
    if kimi_rewritten(result):
        lines.append(f"""
- `KimiLinearForCausalLM.set_dspark_layers_to_capture` refuses PP outright:
  `NotImplementedError("{names.PP_ERROR}")`;
- removing that guard is not enough: non-last ranks return before storing the ids, and
  the model forward passes only `hidden_states` and `residual` across the stage boundary,
  so every capture made on a non-last stage would be dropped silently and the drafter
  would get fewer features than requested;
- the check for callers that pass `None`,
  `ValueError("{names.NONE_ERROR}")`, sits behind that early
  return, so only the last rank would run it.
""")
    if k3_touched(result):
        lines.append(f"""
- `KimiK3LinearForCausalLM.set_dspark_layers_to_capture` refuses PP the same way
  (`NotImplementedError("{names.PP_ERROR}")`), and its stage handoff drops captures too.
""")
    family = result.family.patched if result.family is not None else []
    if family:
        lines.append(f"""
- {len(family)} model files define their capture hooks as
  `if not self.pp_group.is_last_rank: return`, so under PP only the last stage captures:
  the drafter silently gets fewer aux states than it was trained on, or the last stage
  fails unpacking its output when it owns none of the capture layers (details below).
""")
    change = validation_change(result)
    if change is not None:
        flag = (f",\n  and `handle_aux_hidden_state_capture` rejects `{AUX_FLAG}` with "
                "PP\n  (\"the capture hooks only see the layers on the last pipeline rank\")"
                if relaxes_aux_flag(result) else "")
        lines.append(f"""
- even with the models fixed, the server refuses them before any model code runs:
  `check_pipeline_parallel_compat`
  (`{change.path}`) rejects EAGLE3 and DFLASH speculative decoding
  with PP{flag}.
""")
    return "".join(lines)


def validation_design(result: UpstreamResult) -> str:
    """The design bullet of the server-arg validation change ("" without one)."""
    change = validation_change(result)
    if change is None:
        return ""
    found = result.validation.architectures if result.validation is not None else {}
    table = "".join(f"\n    - `{arch}`: {', '.join(kinds)}"
                    for arch, kinds in sorted(found.items()))
    flag = (f"\n  `{AUX_FLAG}` with PP is accepted for the same architectures."
            if relaxes_aux_flag(result) else "")
    return f"""\
- **Server-arg validation** (the patch's last change,
  `{change.path}`): a table of the architectures of the patched model
  files (their `EntryClass`) with the conventions whose hooks were rewritten,
  `{VALIDATION_TABLE}`:{table}
  For those, EAGLE3 takes EAGLE's PP paths (`SGLANG_ENABLE_PP_SPEC`, or PD prefill) and
  DFLASH takes DSPARK's (PD prefill only).{flag}
  Every other refusal stays, and any other architecture is refused as before.
"""


K3_DESIGN = """\
- **Kimi-K3** (`kimi_k3.py`): the same setter and transport. With attention residuals a
  capture mixes the stream with the block bank using the *next* layer's scoring weights,
  which for a stage's last layer live on the next stage. The capture method hands on the
  stream head for that layer (the value the handoff carries as `hidden_states`); the next
  stage, which holds that layer's weights and the same bank, mixes it right after building
  `attn_res`, so the last stage's list equals PP=1's. Relay mode only (the head must pass
  through the next stage): its hook declares `relay_only`, so under PP with
  `SGLANG_PP_AUX_TRANSPORT=direct` it raises `NotImplementedError` naming the model and the
  reason instead of running.
"""


def _kimi_design(result: UpstreamResult) -> str:
    k3 = K3_DESIGN if k3_touched(result) else ""
    if kimi_relay_checked(result):
        return RELAY_DESIGN + k3
    if not kimi_touched(result):
        return k3
    return KIMI_DESIGN + k3


RELAY_ENTRY = "dspark_hidden_states"
RELAY_DESIGN = f"""\
- **Kimi-Linear's own DSPARK relay** (`kimi_linear.py`): every stage after the first checks
  the `{RELAY_ENTRY}` entry it receives against the capture layers below its
  `start_layer` (`hidden_size` wide each) and raises `RuntimeError` naming them when the
  entry is missing, of another width, or present although no earlier stage captures.
"""


KIMI_DESIGN = """\
- **Setter** (`set_dspark_layers_to_capture`): runs the same on every rank. `None` still
  raises the same `ValueError`; ids are then validated with `validate_layer_ids` (type,
  range, duplicates, empty) identically on every rank, stored on every rank, and the hook
  attaches the transport through the same glue call as every other patched model
  (`attach_pp_aux_transport`, see "Mode" below). Its handshake (`all_gather_object` on the
  PP CPU group) compares ids, layer partition, hidden size and mode across ranks and raises
  on *every* rank when they disagree, instead of hanging in a mismatched receive later.
- **Forward** (`KimiLinearModel.forward`): each stage captures the file's own
  materialisation (`hidden_states + residual`) after each listed layer it owns, exactly as
  before, and also records it by layer id. Non-last stages add
  `transport.outgoing(...)` to the `PPProxyTensors` handoff; the last stage calls
  `transport.collect(...)`, which returns the full list in layer order (the PP=1 order)
  and raises if any capture is missing or unexpected — it never returns fewer features.
  With PP=1 nothing is communicated and the result is the list the loop built.
"""


def _test_plan(result: UpstreamResult, test_cmd: str, family_cmd: str,
               validation=None) -> str:
    """Boxes for the checks; only a run of this invocation (``validation``, from
    ``--validate``) ticks one."""
    patched = set(touched_models(result)) - {kimi.MODULE.rsplit(".", 1)[1], kimi_k3.NAME}
    family_ran = (validation is not None and validation.all_passed
                  and patched <= set(validation.verdicts))
    note = ("The family test was run by `auxcap upstream-patch --validate` on a patched copy "
            "of this tree; every other box is ticked by whoever runs it.\n" if family_ran
            else "Not run by the generator; each box is ticked by whoever runs it.\n")
    if validation is not None and validation.problem:
        note += f"`--validate` ran nothing: {validation.problem}.\n"
    lines = [
        note,
        "- [ ] CPU multi-process unittest of the transport (gloo, 2 and 3 stages, relay and "
        f"direct, an empty\n  microbatch), compared with a PP=1 run via `torch.equal`: "
        f"`{test_cmd}`",
    ]
    if result.family is not None and result.family.patched:
        lines.append(
            f"- [{'x' if family_ran else ' '}] CPU multi-process unittest of every patched "
            "family model (real hooks and "
            f"forwards, stand-in\n  decoder layers): `{family_cmd}`"
        )
    if kimi_relay_checked(result):
        lines.append(
            "- [ ] `kimi_linear.py`'s relay check: a last stage given a missing, narrow or "
            "unexpected\n  `dspark_hidden_states` entry raises naming the layers"
        )
    if kimi_rewritten(result):
        lines.append(
            "- [ ] The patched `kimi_linear.py` driven as real pipeline stages (gloo, 2 and 3 "
            "stages), aux\n  states equal to the PP=1 run"
        )
    if k3_touched(result):
        lines.append(
            "- [ ] The patched `kimi_k3.py` driven as real pipeline stages (gloo, 2 and 3 "
            "stages, with and\n  without attention residuals), aux states equal to the PP=1 run"
        )
    if validation_change(result) is not None:
        flag = f" and `{AUX_FLAG}`" if relaxes_aux_flag(result) else ""
        lines.append(
            f"- [ ] Server-arg validation: EAGLE3/DFLASH{flag} with PP accepted for the "
            "listed\n  architectures and still refused for any other"
        )
    lines.append("- [ ] GPU run with `--pp-size 2` and speculative decoding (NCCL).")
    return "\n".join(lines) + "\n"


def series_section(series) -> str:
    """One section per patch of a ``--series`` run: ``[(file name, SeriesPatch), ...]``."""
    if not series:
        return ""
    parts = [f"## Patch series\n\nReview in order; {len(series)} patches, each one commit.\n"]
    for number, (name, patch) in enumerate(series, start=1):
        files = "".join(f"- `{path}`\n" for path in patch.paths)
        body = patch.body.split("\nFiles:\n", 1)[0].strip()
        parts.append(f"\n### {number}. {patch.subject}\n\n`{name}`\n\n{body}\n\n{files}")
    return "".join(parts) + "\n"


def render(result: UpstreamResult, patch_name: str | None = None, series=None,
           validation=None) -> str:
    """``series``: ``[(file name, SeriesPatch)]`` of ``--series``; ``validation``: what
    ``--validate`` ran (``validate_run.Validation``), None when it was not asked for."""
    mode = result.mode
    tree = result.tree
    test_cmd = (
        f"cd {tree.tests} && python3 -m unittest test_pp_aux_capture"
        if tree.kind == "checkout"
        else "python3 -m unittest sglang.test.test_pp_aux_capture"
    )
    files = "\n".join(f"- `{path}`" for path in result.changed)
    other_mode = "direct" if mode == "relay" else "relay"
    family_cmd = (
        f"cd {tree.tests} && python3 -m unittest test_pp_aux_capture_family"
        if tree.kind == "checkout"
        else "python3 -m unittest sglang.test.test_pp_aux_capture_family"
    )
    family = pr_section(result.family, family_cmd,
                        validation.verdicts if validation is not None else None)
    title = title_of(result)
    kimi_names = [name for touched, name in ((kimi_rewritten(result), "Kimi-Linear"),
                                             (k3_touched(result), "Kimi-K3")) if touched]
    kimi_hooks = f" ({' and '.join(kimi_names)} included)" if kimi_names else ""
    capture_bytes = EXAMPLE_HIDDEN * EXAMPLE_DTYPE_BYTES
    return f"""\
{title}

## Motivation

{_motivation(result)}
## Design

{_kimi_design(result)}{validation_design(result)}- **Transport** (new `{result.transport_path}`, pure
  `torch.distributed`): the layer partition follows `get_pp_indices` (including
  `SGLANG_PP_LAYER_PARTITION`).
  - `relay`{" (default)" if mode == "relay" else ""}: captures ride
    the existing stage handoff in one `aux_hidden_states` entry (`[tokens, n * hidden]`,
    ascending layer order, the layout of `dspark_hidden_states`); no new communication
    calls, the scheduler's existing tensor-dict send/recv moves them.
  - `direct`{" (default)" if mode == "direct" else ""}: stages two or more hops
    from the last `isend` their captures straight to the last rank; the stage next to the
    last rides the handoff. Every capture crosses one link. The sends go over dedicated
    process groups that the glue creates (`new_direct_group`, one per PP group, collective
    over the world), never over the PP groups the scheduler sends on.
- **Mode, one mechanism for every model**: each patched hook{kimi_hooks} calls
  `attach_pp_aux_transport` of `{result.glue_path}`, which reads
  `SGLANG_PP_AUX_TRANSPORT=relay|direct` at run time on every rank (default
  `DEFAULT_MODE = "{mode}"`, written by the generator's `--mode`; `--mode {other_mode}`
  changes only that default) and builds the transport with the same groups for every model.
  No model file names a mode. A model whose forward needs every capture to pass through
  the next stage declares `relay_only=...`; under PP its hook then raises
  `NotImplementedError` naming the model and the reason when the mode is not relay.

## Bytes on the wire

Aux traffic per forward, analytic, for an example configuration: {EXAMPLE_LAYERS} layers,
hidden size {EXAMPLE_HIDDEN}, bf16, capture layers {list(EXAMPLE_CAPTURE)}, even layer
split. One capture of one token is `hidden × dtype bytes` = {capture_bytes} B;
relay moves a capture made on stage `s` across `P - 1 - s` links, direct across one.
"Into last rank" and "busiest link" are for {EXAMPLE_TOKENS[-1]} tokens.

{traffic_table()}

Relay needs no communication code in the model (each aux entry is one more tensor of the
handoff the scheduler already sends) but re-sends early captures on every later link;
direct sends each capture exactly once, with its own `isend`/`irecv` into the last rank
outside the handoff. Both deliver the same bytes into the last rank; direct lowers the
total and the load of the busiest link once PP >= 3.

{cuda_graphs(result)}
{family}## Test plan

{_test_plan(result, test_cmd, family_cmd, validation)}
{series_section(series)}## Files

{files}
"""
