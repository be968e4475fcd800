"""The PR body's sentences about the sizing of the aux entry and what the patch deprecates.

``sizing_line(result)`` is the Modifications bullet on the CUDA-graph (and dummy-forward)
buffers of the PP handoff: renamed from SGLang's DSPARK path (0.5.21+), added along a new
path (0.5.17-0.5.20), or why the tree's buffers are left unsized.  ``deprecated_section``
is the "Deprecated" section, where the patch keeps the release's DSPARK relay contract for
one release (``sizing/dspark_alias.py``); empty elsewhere.
"""

from __future__ import annotations

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.change_kinds import RENAME_ROLES, Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.output.result_facts import relays_through_helpers
from codemods.upstream.result import UpstreamResult
from codemods.upstream.sizing.part import no_graph_buffer


def code_span(path: str) -> str:
    return f"`{path}`"


def changed_by(result: UpstreamResult, *roles: Role) -> list[FileChange]:
    """The patch's changes with one of ``roles``, in patch order."""
    return [change for change in result.changes if change.changed and change.role in roles]


def sizing_line(result: UpstreamResult) -> str:
    sizing = [c.path for c in changed_by(result, Role.SIZING, Role.SIZING_RENAME)]
    if not sizing:
        return (
            "- CUDA graphs: this tree's proxy buffers are not sized for the aux entry: "
            f"{no_graph_buffer('`')}."
        )
    if changed_by(result, *RENAME_ROLES):
        relays = [c.path for c in changed_by(result, Role.RELAY_RENAME)]
        return (
            f"- SGLang's {NATIVE.name} entry and CUDA-graph sizing now serve every capture "
            "method: `dspark_hidden_states` -> `aux_hidden_states`, "
            "`*pp_proxy_dspark_hidden_size` -> `*pp_proxy_aux_hidden_size` in "
            f"{', '.join(code_span(p) for p in sizing + relays)}; the resolver asks "
            f"{_LOOKUP}{_one_relay(result)}{_old_width(result)}.{_warmup(result)}"
        )
    return (
        "- CUDA-graph sizing of the `aux_hidden_states` proxy entry along a new path "
        f"(`resolve_pp_proxy_aux_hidden_size`, which asks {_LOOKUP}): "
        f"{', '.join(code_span(p) for p in sizing)}.{_warmup(result)}"
    )


def _warmup(result: UpstreamResult) -> str:
    """The dummy-forward buffers that gain the entry, in a sentence (or nothing)."""
    warmup = [c.path for c in changed_by(result, Role.WARMUP_SIZING)]
    if not warmup:
        return ""
    return (
        f" The buffers {', '.join(code_span(p) for p in warmup)} builds for the dummy forwards "
        "of start-up (`_alloc_dummy_decode_buffers`: FlashInfer autotune, DeepGEMM "
        "warm-up) get the entry too, sized by `get_pp_proxy_aux_hidden_size`, so a stage "
        "that receives captures gets through them."
    )


#: How the sizing finds the width, in words.
_LOOKUP = (
    f"one lookup, `{names.WIDTH}(model)`, which finds the relay a hook gave the model's "
    "decoder stack (no width method per model; a model's own "
    "`get_pp_proxy_aux_hidden_size` is still asked first)"
)


def _one_relay(result: UpstreamResult) -> str:
    """The relay files that now go through the runtime's helpers, in words."""
    helpers = [
        c.path.rsplit("/", 1)[-1]
        for c in changed_by(result, Role.RELAY_RENAME)
        if relays_through_helpers(c)
    ]
    if not helpers:
        return ""
    return (
        f"; {', '.join(code_span(f) for f in helpers)} relay through the runtime's helpers "
        "instead of their own code and width methods (one mechanism for every model)"
    )


def _old_width(result: UpstreamResult) -> str:
    """The deprecated width method, where the patch keeps asking it."""
    kept = [
        c.path
        for c in changed_by(result, Role.SIZING_RENAME)
        if "get_pp_proxy_dspark_hidden_size" in c.new and "deprecated" in c.new
    ]
    if not kept:
        return ""
    return (
        "; a model that still defines `get_pp_proxy_dspark_hidden_size` (out of tree) is "
        "sized by it for one more release, with a deprecation warning (see Deprecated)"
    )


def deprecated_section(result: UpstreamResult) -> str:
    """What the patch keeps of the release's DSPARK relay contract for one release, where
    it keeps it (``sizing/dspark_alias.py``)."""
    sizing = {c.path.rsplit("/", 1)[-1]: c.new for c in changed_by(result, Role.SIZING_RENAME)}
    if "def resolve_pp_proxy_dspark_hidden_size(" not in sizing.get("misc_utils.py", ""):
        return ""
    return (
        "\n### Deprecated\n\n"
        "Kept for one release, each with a deprecation warning in SGLang's log, and removed "
        f"in the next, so that a model written against the release's {NATIVE.name} relay (out of "
        "tree, as Kimi-Linear was written) keeps working under PP:\n\n"
        "- `get_pp_proxy_dspark_hidden_size` on a model class: the runtime guard "
        "(`check_pp_aux_capture` in `configure_aux_hidden_state_capture`) still admits a "
        f"class that defines it for {NATIVE.name} under PP (`relays_pp_aux_capture`: it relays "
        f"{NATIVE.name} itself, as on the release), and "
        "`resolve_pp_proxy_aux_hidden_size` sizes its buffers by it (after a model's own "
        "`get_pp_proxy_aux_hidden_size`; warns).\n"
        "- The `dspark_hidden_states` PP proxy entry: such a model's CUDA-graph and "
        "dummy-forward buffers are kept under the key it sends "
        "(`misc_utils.resolve_pp_proxy_aux_entry`, `ModelRunner.get_pp_proxy_aux_entry`, "
        "the new `pp_proxy_aux_entry=` keyword), so the replay refresh fills them; every "
        "other model uses `aux_hidden_states`.\n"
        "- `misc_utils.resolve_pp_proxy_dspark_hidden_size`: alias of "
        "`resolve_pp_proxy_aux_hidden_size` (warns).\n"
        "- The `pp_proxy_dspark_hidden_size=` keyword of `allocate_pp_proxy_tensors`, "
        "`DecodeInputBuffers.create` and `PrefillInputBuffers.create`: alias of "
        "`pp_proxy_aux_hidden_size=` (`allocate_pp_proxy_tensors` warns).\n"
    )
