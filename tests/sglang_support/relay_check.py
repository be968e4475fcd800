"""Call the real ``KimiLinearModel.forward`` (SGLang 0.5.21+) as the last pipeline stage.

Usage: ``python -m sglang_support.relay_check [ENTRY ...]`` under ``env.sglang_env(tree)``;
``ENTRY`` is the ``PPProxyTensors`` key the earlier stages' captures arrive in (default
``dspark_hidden_states``, the release's).  Prints one JSON object: case name ->
``{"aux_widths": [...]}`` (what the stage hands on) or ``{"error": "<message>"}`` (what it
raised); with several entries, one such object per entry (``{ENTRY: {case: ...}}``).

The stage is the last of 2 built by ``stages.stage_factory`` (6 layers, this stage owns
layers 3-5, hidden size 4, the DSPARK hook called with the case's ids, so the patched
hook sets the shipped relay up; the shipped stand-in layers, taking the residual on
0.5.21, whose layers still take one, capturing at entry on 0.5.22+).  Each case hands the
stage a PP proxy as an earlier stage (or a CUDA-graph buffer) would.
"""

from __future__ import annotations

import json
import sys

import sglang.srt.models.kimi_linear as kimi_linear
import torch

from sglang_support.stages import stage_factory

HIDDEN = 4
NUM_LAYERS = 6
#: 0.5.21 passes the residual through its layers and the proxy; 0.5.22+ through residual_batch.
USES_RESIDUAL_BATCH = hasattr(kimi_linear, "residual_batch")


def run(
    layer_ids: list[int],
    tokens: int,
    relayed_width: int | None,
    entry: str = "dspark_hidden_states",
) -> dict:
    spec = dict(model="kimi_linear", layer_ids=layer_ids, num_layers=NUM_LAYERS)
    spec.update(hidden_size=HIDDEN, layers="entry" if USES_RESIDUAL_BATCH else "classic")
    stage = stage_factory(spec, 1, 2)
    hidden = torch.arange(tokens * HIDDEN, dtype=torch.float32).view(tokens, HIDDEN)
    tensors = {"hidden_states": hidden}
    if not USES_RESIDUAL_BATCH:
        tensors["residual"] = torch.zeros_like(hidden)
    if relayed_width is not None:
        tensors[entry] = torch.full((tokens, relayed_width), 7.0)
    try:
        _, aux = stage.forward(0, None, tensors)
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
    entries = sys.argv[1:] or ["dspark_hidden_states"]
    results = {
        entry: {name: run(*case, entry=entry) for name, case in CASES.items()} for entry in entries
    }
    print(json.dumps(results[entries[0]] if len(entries) == 1 else results))


if __name__ == "__main__":
    main()
