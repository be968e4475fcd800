"""Drive the CUDA-graph sizing path of a patched SGLang tree on CPU, one process.

Usage: ``python -m sglang_support.sizing_check MODEL_MODULE CLASS``, with the patched tree
on ``PYTHONPATH`` (see ``env.sglang_env``).  For 2- and 3-stage splits and several
capture sets, every stage gets the transport the patched capture hook attaches
(``attach_pp_aux_transport``, with the stage's layer range; the handshake's collective
is answered locally), and:

* its width comes through the real chain: the patched model class's
  ``get_pp_proxy_aux_hidden_size`` -> ``misc_utils.resolve_pp_proxy_aux_hidden_size``;
* the real ``allocate_pp_proxy_tensors`` (``_allocate_pp_proxy_tensors`` on 0.5.21) and ``PrefillInputBuffers.create`` allocate the
  ``aux_hidden_states`` buffer with that width;
* that width equals the width of the entry the previous stage really sends
  (``PPAuxTransport.outgoing``), which is copied into the buffer as a graph replay does
  and handed on; the last stage's captures equal the captures made (``torch.equal``).

Prints one JSON line: ``{"checks": [...], "errors": [...]}``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types

import torch

NUM_LAYERS = 9
HIDDEN = 4
MAX_TOKENS = 16
TOKENS = (3, 0, 2)
CAPTURES = ([7, 0, 4], [1, 0], [8, 2, 5])


def _stage(plan_module, glue, outer_cls, layer_ids, pp_rank, pp_size):
    start, end = plan_module.pp_layer_range(NUM_LAYERS, pp_rank, pp_size)
    decoder = types.SimpleNamespace(
        config=types.SimpleNamespace(num_hidden_layers=NUM_LAYERS, hidden_size=HIDDEN),
        layers=[None] * NUM_LAYERS,
        start_layer=start,
        end_layer=end,
        layers_to_capture=list(layer_ids),
    )
    group = types.SimpleNamespace(
        world_size=pp_size, rank_in_group=pp_rank, cpu_group=None, ranks=list(range(pp_size))
    )
    glue.attach_pp_aux_transport(decoder, group)
    outer = outer_cls.__new__(outer_cls)  # the real class, without loading weights
    outer.__dict__["model"] = decoder
    return outer, decoder.pp_aux_transport


def main() -> None:
    module_name, class_name = sys.argv[1], sys.argv[2]
    outer_cls = getattr(importlib.import_module(module_name), class_name)
    glue = importlib.import_module("sglang.srt.distributed.pp_aux_capture")
    transport_module = importlib.import_module("sglang.srt.distributed.pp_aux_transport")
    # One process plays every stage, so the handshake's collective is answered with the
    # same configuration from every rank (the multi-process drives run the real one).
    transport_module._all_gather = lambda group, payload, pp_size: [
        dict(payload, pp_rank=rank) for rank in range(pp_size)
    ]
    plan_module = importlib.import_module("sglang.srt.distributed.pp_aux_plan")
    misc = importlib.import_module(
        "sglang.srt.model_executor.model_runner_components.misc_utils"
    )
    buffers = importlib.import_module("sglang.srt.model_executor.runner_utils.buffers")
    entry = plan_module.AUX_ENTRY
    # 0.5.21 keeps the allocation function private (``_allocate_pp_proxy_tensors``).
    allocate = getattr(buffers, "allocate_pp_proxy_tensors", None)
    if allocate is None:
        allocate = buffers._allocate_pp_proxy_tensors
    checks, errors = [], []
    decode_params = inspect.signature(buffers.DecodeInputBuffers.create).parameters
    if "pp_proxy_aux_hidden_size" not in decode_params:
        errors.append("DecodeInputBuffers.create takes no pp_proxy_aux_hidden_size")
    generator = torch.Generator().manual_seed(0)
    for pp_size in (2, 3):
        for layer_ids in CAPTURES:
            for tokens in TOKENS:
                made = {
                    i: torch.randn(tokens, HIDDEN, generator=generator) for i in layer_ids
                }
                handoff = {}
                for pp_rank in range(pp_size):
                    outer, transport = _stage(
                        plan_module, glue, outer_cls, layer_ids, pp_rank, pp_size
                    )
                    width = misc.resolve_pp_proxy_aux_hidden_size(
                        model=outer, pp_size=pp_size, pp_rank=pp_rank
                    )
                    sent = handoff.get(entry)
                    sent_width = 0 if sent is None else sent.shape[-1]
                    allocated = allocate(
                        max_num_tokens=MAX_TOKENS,
                        max_hidden_tokens=MAX_TOKENS,
                        hidden_size=HIDDEN,
                        dtype=torch.float32,
                        pp_proxy_aux_hidden_size=width,
                    )
                    prefill = buffers.PrefillInputBuffers.create(
                        device=torch.device("cpu"),
                        max_bs=4,
                        max_num_tokens=MAX_TOKENS,
                        cache_loc_dtype=torch.int64,
                        is_multimodal=False,
                        hidden_size=HIDDEN,
                        dtype=torch.float32,
                        enable_mamba_track=False,
                        pp_size=pp_size,
                        is_first_pp_rank=pp_rank == 0,
                        pp_proxy_aux_hidden_size=width,
                    )
                    label = f"pp={pp_size} ids={layer_ids} tokens={tokens} stage={pp_rank}"
                    widths = [
                        tensors[entry].shape[-1] if entry in tensors else 0
                        for tensors in (allocated, prefill.pp_proxy_tensors or {})
                    ]
                    checks.append([label, width, sent_width, widths])
                    if widths != [sent_width, sent_width] or width != sent_width:
                        errors.append(
                            f"{label}: allocated {widths}, resolved {width}, "
                            f"previous stage sent {sent_width}"
                        )
                        break
                    incoming = {}
                    if sent is not None:
                        buffer = allocated[entry]
                        buffer[:tokens].copy_(sent)  # what a replay copies in
                        incoming[entry] = buffer[:tokens]
                    plan = transport.plan
                    own = {i: made[i] for i in plan.local_layer_ids}
                    if plan.is_last_stage:
                        like = torch.zeros(tokens, HIDDEN)
                        got = transport.collect(own, incoming, like=like)
                        want = [made[i] for i in plan.layer_ids]
                        same = len(got) == len(want) and all(
                            torch.equal(a, b) for a, b in zip(got, want, strict=True)
                        )
                        if not same:
                            errors.append(f"{label}: captures differ from those made")
                    else:
                        handoff = transport.outgoing(own, incoming)
    print(json.dumps({"checks": checks, "errors": errors}))


if __name__ == "__main__":
    main()
