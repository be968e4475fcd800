"""Call the real ``KimiLinearModel.forward`` (SGLang 0.5.21+) as the last pipeline stage.

Usage: ``python -m sglang_support.relay_check [ENTRY ...]`` under ``env.sglang_env(tree)``;
``ENTRY`` is the ``PPProxyTensors`` key the earlier stages' captures arrive in (default
``dspark_hidden_states``, the release's).  Prints one JSON object: case name ->
``{"aux_widths": [...]}`` (what the stage hands on) or ``{"error": "<message>"}`` (what it
raised); with several entries, one such object per entry (``{ENTRY: {case: ...}}``).

The model instance is built without its ``__init__`` (``stages.bare``): 6 layers, this stage
owns layers 3-5, hidden size 4, the shipped relay set up as the patched DSPARK hook sets it
(where the module relays through the shipped helpers), stand-in decoder layers that add 1 (returning the residual
on 0.5.21, whose layers still take one), the release's own ``BumpAllocator``,
``_materialize_residual_stream`` and ``PPProxyTensors``; on 0.5.22+ a stand-in
``residual_batch`` (snapshot = copy, final norm = identity) and ``attn_boundary.from_pp``.
Each case hands the stage a PP proxy as an earlier stage (or a CUDA-graph buffer) would.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import sglang.srt.models.kimi_linear as kimi_linear
import torch
from sglang.srt.model_executor.forward_batch_info import PPProxyTensors
from torch import nn

from sglang_support.stages import NullExpertRecorder, bare

HIDDEN = 4
NUM_LAYERS = 6
START, END = 3, 6
#: 0.5.21 passes the residual through its layers and the proxy; 0.5.22+ through residual_batch.
USES_RESIDUAL_BATCH = hasattr(kimi_linear, "residual_batch")


class FromPP:
    def from_pp(self, proxy, forward_batch):
        return proxy["hidden_states"]


class AddOneLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_boundary = FromPP()

    def forward(
        self, positions=None, hidden_states=None, forward_batch=None, zero_allocator=None, **kwargs
    ):
        if "residual" in kwargs:
            residual = kwargs["residual"]
            if residual is None:
                residual = torch.zeros_like(hidden_states)
            return hidden_states + 1, residual
        return hidden_states + 1


class IdentityNorm(nn.Module):
    def forward(self, hidden_states, residual=None):
        return hidden_states if residual is None else (hidden_states, residual)


class StandInResidualBatch:
    def snapshot(self, hidden_states, forward_batch):
        return hidden_states.clone()

    def final_norm(self, hidden_states, forward_batch, norm, skip_empty=False):
        return hidden_states


def last_stage(layer_ids: list[int]):
    model = bare(kimi_linear.KimiLinearModel)
    model.config = SimpleNamespace(hidden_size=HIDDEN)
    model.start_layer, model.end_layer = START, END
    model.layers = nn.ModuleList([AddOneLayer() for _ in range(NUM_LAYERS)])
    model.norm = IdentityNorm()
    model.pp_group = SimpleNamespace(is_first_rank=False, is_last_rank=True)
    model.dspark_layers_to_capture = list(layer_ids)
    if hasattr(kimi_linear, "set_pp_aux_capture"):
        # Patched: the relay goes through the shipped helpers, set up by the DSPARK hook.
        group = SimpleNamespace(world_size=2, is_first_rank=False, is_last_rank=True)
        kimi_linear.set_pp_aux_capture(
            model, group, ids_attr="dspark_layers_to_capture", hidden_size=HIDDEN
        )
    return model


def run(
    layer_ids: list[int],
    tokens: int,
    relayed_width: int | None,
    entry: str = "dspark_hidden_states",
) -> dict:
    model = last_stage(layer_ids)
    hidden = torch.arange(tokens * HIDDEN, dtype=torch.float32).view(tokens, HIDDEN)
    tensors = {"hidden_states": hidden}
    if not USES_RESIDUAL_BATCH:
        tensors["residual"] = torch.zeros_like(hidden)
    if relayed_width is not None:
        tensors[entry] = torch.full((tokens, relayed_width), 7.0)
    try:
        _, aux = model.forward(
            None,
            torch.zeros(tokens, dtype=torch.long),
            SimpleNamespace(),
            pp_proxy_tensors=PPProxyTensors(tensors),
        )
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {"aux_widths": [int(a.shape[-1]) for a in aux], "rows": [int(a.shape[0]) for a in aux]}


#: name -> (capture layer ids, tokens, width of the relayed entry or None for no entry)
CASES = {
    "complete": ([1, 4], 3, HIDDEN),
    "complete_two_earlier": ([0, 1, 4], 2, 2 * HIDDEN),
    "empty_batch": ([1, 4], 0, HIDDEN),
    "nothing_earlier": ([4, 5], 3, None),
    "missing": ([1, 4], 3, None),
    "missing_empty_batch": ([1, 4], 0, None),
    "narrow": ([0, 1, 4], 3, HIDDEN),
    "unexpected": ([4], 3, HIDDEN),
}


def main() -> None:
    kimi_linear.get_global_expert_distribution_recorder = NullExpertRecorder
    kimi_linear.get_parallel = lambda: SimpleNamespace(
        pp_group=SimpleNamespace(is_first_rank=False, is_last_rank=True)
    )
    if USES_RESIDUAL_BATCH:
        kimi_linear.residual_batch = StandInResidualBatch()
    entries = sys.argv[1:] or ["dspark_hidden_states"]
    results = {
        entry: {name: run(*case, entry=entry) for name, case in CASES.items()} for entry in entries
    }
    print(json.dumps(results[entries[0]] if len(entries) == 1 else results))


if __name__ == "__main__":
    main()
