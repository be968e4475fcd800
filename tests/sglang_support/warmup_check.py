"""Drive llama stages with the runner's dummy-forward buffers of a patched SGLang tree, on
CPU, in one process.

Usage: ``python -m sglang_support.warmup_check``, with the tree on ``PYTHONPATH`` (see
``env.sglang_env``).  For 2- and 3-stage splits, several capture sets and batches:

* each stage is the real ``LlamaForCausalLM`` over its real ``LlamaModel`` forward, built
  without weights (``stages.bare``) with stand-in layers, embedding, norm and logits
  processor (``entry_stage.entry_stage_factory`` where the decoder layers capture at
  entry, 0.5.22+; the classic ``(hidden_states, residual)`` layers of
  ``stages.StampDecoderLayer`` before), and the file's real EAGLE3 hook;
* every stage after the first gets its PP proxy buffers from SGLang's own
  ``BaseRunner._alloc_dummy_decode_buffers`` -> ``_allocate_decode_buffers`` (the
  buffers of the FlashInfer autotune and the DeepGEMM warm-up), over a stand-in model
  runner whose ``get_pp_proxy_aux_hidden_size`` (and ``get_pp_proxy_aux_entry``, 0.5.21+)
  is the real ``ModelRunner`` method (the patched resolver, then
  ``pp_aux_proxy_hidden_size(model)``);
* (a) the set must hold ``aux_hidden_states`` with the rows of ``hidden_states`` and the
  width of the entry the previous stage really sends;
* (b) the dummy forward: the stage runs on the buffers as ``_dummy_run`` hands them over
  (each entry sliced to the batch, then cloned), zeros as they are: it must not raise,
  and the last stage hands on as many aux states as PP=1;
* (c) the same buffers, the previous stage's real handoff copied into them: the last
  stage's aux states and final hidden states equal the PP=1 run's (``torch.equal``).

Prints one JSON line: ``{"checks": [[label, width, sent_width, rows], ...], "errors":
[...], "aux_buffers": N, "dummy_forwards": N, "equal_runs": N}``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import types
from types import SimpleNamespace

import torch

from sglang_support.drive import same_outputs
from sglang_support.stages import (
    DTYPE,
    FakePPGroup,
    NullExpertRecorder,
    RecordingLogitsProcessor,
    StampDecoderLayer,
    StandInEmbedding,
    StandInNorm,
    bare,
    embed_input,
    patch_globals,
    stage_layers,
)

NUM_LAYERS = 9
HIDDEN = 4
MAX_BS = 8
TOKENS = (3, 1, 5)
CAPTURES = ([1, 3, 4, 6], [7, 0, 4], [0, 1])
AUX = "aux_hidden_states"


class ClassicStage:
    """A stage of the classic ``LlamaModel`` (layers take and return the residual)."""

    def __init__(self, lm, proxy_cls, group):
        self.lm, self.proxy_cls, self.group = lm, proxy_cls, group

    def forward(self, mb, hidden_in, proxy):
        batch = SimpleNamespace(microbatch=mb)
        pp_proxy = None if proxy is None else self.proxy_cls(dict(proxy))
        embeds = hidden_in if self.group.is_first_rank else None
        out = self.lm.forward(None, None, batch, embeds, pp_proxy_tensors=pp_proxy)
        if not self.group.is_last_rank:
            return {k: v for k, v in out.tensors.items() if v is not None}
        aux = out.aux_hidden_states
        return out.hidden_states, aux if aux is not None else []


def classic_stage(pp_rank, pp_size, layer_ids):
    from sglang.srt.distributed import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    module = importlib.import_module("sglang.srt.models.llama")
    group = FakePPGroup(pp_rank, pp_size)
    patch_globals(module, get_global_expert_distribution_recorder=NullExpertRecorder)
    config = SimpleNamespace(num_hidden_layers=NUM_LAYERS, hidden_size=HIDDEN, vocab_size=32)
    start, end = get_pp_indices(NUM_LAYERS, pp_rank, pp_size)
    model = bare(module.LlamaModel)
    model.config = config
    model.pp_group = group
    model.embed_tokens = StandInEmbedding(HIDDEN) if group.is_first_rank else PPMissingLayer()
    model.layers = stage_layers(NUM_LAYERS, start, end, PPMissingLayer, StampDecoderLayer)
    model.start_layer, model.end_layer = start, end
    model.norm = StandInNorm() if group.is_last_rank else PPMissingLayer(return_tuple=True)
    model.layers_to_capture = []
    lm = bare(module.LlamaForCausalLM)
    lm.config = config
    lm.pp_group = group
    lm.model = model
    lm.lm_head = torch.nn.Identity()
    lm.logits_processor = RecordingLogitsProcessor()
    lm.capture_aux_hidden_states = False
    lm.set_eagle3_layers_to_capture(list(layer_ids))
    return ClassicStage(lm, PPProxyTensors, group)


def make_stage(pp_rank, pp_size, layer_ids):
    module = importlib.import_module("sglang.srt.models.llama")
    if "capture_output" in inspect.getsource(module.LlamaModel.forward):
        from sglang_support.entry_stage import entry_stage_factory

        spec = {
            "model": "llama",
            "hook": "eagle3",
            "layer_ids": list(layer_ids),
            "num_layers": NUM_LAYERS,
            "hidden_size": HIDDEN,
        }
        return entry_stage_factory(spec, pp_rank, pp_size, {})
    return classic_stage(pp_rank, pp_size, layer_ids)


class DummyBuffers:
    """SGLang's ``_alloc_dummy_decode_buffers`` of the tree under test, over a stand-in
    model runner whose aux width getter is the real ``ModelRunner`` one."""

    def __init__(self):
        self.base = importlib.import_module("sglang.srt.model_executor.runner.base_runner")
        self.model_runner_cls = importlib.import_module(
            "sglang.srt.model_executor.model_runner"
        ).ModelRunner
        # What a CPU process has no server for: no DP/TP gather, no padding count.
        self.base.require_mlp_tp_gather = lambda *args: False
        if hasattr(self.base, "enable_num_token_non_padded"):
            self.base.enable_num_token_non_padded = lambda *args: False

    def allocate(self, lm, pp_rank, pp_size):
        ps = SimpleNamespace(pp_size=pp_size, pp_rank=pp_rank, dp_size=1, num_dp_ranks=1)
        if hasattr(self.base, "get_parallel"):
            self.base.get_parallel = lambda: ps
        mr = SimpleNamespace(
            model=lm,
            device=torch.device("cpu"),
            model_config=SimpleNamespace(
                hidden_size=HIDDEN,
                vocab_size=32,
                dtype=DTYPE,
                is_encoder_decoder=False,
                hf_config=SimpleNamespace(),
            ),
            server_args=SimpleNamespace(pp_size=pp_size),
            pp_size=pp_size,
            pp_rank=pp_rank,
            ps=ps,
            pp_group=SimpleNamespace(world_size=pp_size, rank_in_group=pp_rank),
            attn_backend=SimpleNamespace(get_cuda_graph_seq_len_fill_value=lambda: 1),
            ngram_embedding_manager=SimpleNamespace(enabled=False, table=None),
            get_pp_proxy_topk_size=lambda: None,
            get_pp_proxy_residual_num_blocks=lambda: None,
        )
        # The real getters (0.5.21+ also name the entry the buffers are kept under).
        for name in ("get_pp_proxy_aux_hidden_size", "get_pp_proxy_aux_entry"):
            getter = getattr(self.model_runner_cls, name, None)
            if getter is not None:
                setattr(mr, name, types.MethodType(getter, mr))
        runner = SimpleNamespace(model_runner=mr)
        return self.base.BaseRunner._alloc_dummy_decode_buffers(runner, MAX_BS)


def dummy_run_proxy(buffers, tokens):
    """The proxy ``_dummy_run`` hands the model: each buffer sliced, then cloned."""
    sliced = {k: v[:tokens] for k, v in buffers.pp_proxy_tensors.items()}
    return {k: v.clone() for k, v in sliced.items()}


def main() -> None:
    torch.set_num_threads(1)
    dummy = DummyBuffers()
    checks, errors = [], []
    aux_buffers = dummy_forwards = equal_runs = 0
    for pp_size in (2, 3):
        for layer_ids in CAPTURES:
            stages = [make_stage(rank, pp_size, layer_ids) for rank in range(pp_size)]
            reference_stage = make_stage(0, 1, layer_ids)
            for mb, tokens in enumerate(TOKENS):
                label = f"pp={pp_size} ids={layer_ids} tokens={tokens}"
                hidden_in = embed_input(tokens, mb, HIDDEN)
                reference = [reference_stage.forward(mb, hidden_in, None)]
                handoff = stages[0].forward(mb, hidden_in, None)
                failed = False
                for rank in range(1, pp_size):
                    where = f"{label} stage={rank}"
                    buffers = dummy.allocate(stages[rank].lm, rank, pp_size).pp_proxy_tensors
                    sent = handoff.get(AUX)
                    sent_width = 0 if sent is None else sent.shape[-1]
                    entry = buffers.get(AUX)
                    width = 0 if entry is None else entry.shape[-1]
                    rows = [buffers["hidden_states"].shape[0], 0 if entry is None else len(entry)]
                    checks.append([where, width, sent_width, rows])
                    aux_buffers += entry is not None
                    if width != sent_width or (entry is not None and len(set(rows)) != 1):
                        errors.append(
                            f"{where}: dummy buffers hold {AUX} {width} wide ({rows} rows), "
                            f"the previous stage sent {sent_width}"
                        )
                    buffer_set = SimpleNamespace(pp_proxy_tensors=buffers)
                    try:  # (b) the dummy forward of warm-up / autotune
                        out = stages[rank].forward(mb, None, dummy_run_proxy(buffer_set, tokens))
                        dummy_forwards += 1
                        if rank == pp_size - 1 and len(out[1]) != len(reference[0][1]):
                            errors.append(
                                f"{where}: the dummy forward hands on {len(out[1])} aux "
                                f"states, PP=1 {len(reference[0][1])}"
                            )
                    except Exception as err:  # noqa: BLE001 - reported, the run goes on
                        errors.append(f"{where}: dummy forward raised {err}")
                    # (c) the real handoff through the same buffers
                    missing = sorted(set(handoff) - set(buffers))
                    if missing:
                        errors.append(f"{where}: dummy buffers have no room for {missing}")
                        failed = True
                        break
                    for key, tensor in handoff.items():
                        buffers[key][:tokens].copy_(tensor)
                    try:
                        handoff = stages[rank].forward(
                            mb, None, dummy_run_proxy(buffer_set, tokens)
                        )
                    except Exception as err:  # noqa: BLE001
                        errors.append(f"{where}: forward on the filled buffers raised {err}")
                        failed = True
                        break
                if failed:
                    continue
                same, detail = same_outputs([handoff], reference)
                if same:
                    equal_runs += 1
                else:
                    errors.append(f"{label}: {detail}")
    print(
        json.dumps(
            {
                "checks": checks,
                "errors": errors,
                "aux_buffers": aux_buffers,
                "dummy_forwards": dummy_forwards,
                "equal_runs": equal_runs,
            }
        )
    )


if __name__ == "__main__":
    main()
