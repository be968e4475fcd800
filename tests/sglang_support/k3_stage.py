"""Pipeline stages of SGLang's real Kimi-K3 classes (``KimiK3LinearModel``,
``KimiK3LinearForCausalLM`` of ``sglang.srt.models.kimi_k3``, patched or not), on CPU.

``k3_stage_factory(spec, pp_rank, pp_size, transport_kwargs)`` has the stage-factory
interface of ``codemods.ppcheck`` / ``sglang_support.drive``: it builds the stage's model and
causal LM without their constructors (which need CUDA kernels), with stand-in decoder layers,
and calls the file's real ``set_dspark_layers_to_capture``.  The forward that runs is the
file's own, including its attention-residual bank (``AttnResidual`` of
``sglang.srt.layers.attn_residual``) and its capture method ``_dspark_capture_stream``, which
mixes the stream with the bank through ``aggregate_stream``.  The only kernels replaced are
the GPU ones of the output-side aggregation (``_aggregate_fused`` becomes its eager
equivalent, ``aggregate_stream_torch`` followed by the output norm).

``spec`` keys: ``num_layers``, ``hidden_size``, ``layer_ids``, ``attn_res_block_size``
(None: plain residual stream), optional ``bypass_setter`` (store the ids on every stage as
if the setter's PP guard were gone).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from sglang_support.kimi_stage import KimiStage, _spec
from sglang_support.stages import (
    DTYPE,
    FakePPGroup,
    NullExpertRecorder,
    RecordingLogitsProcessor,
    StandInEmbedding,
    StandInNorm,
    bare,
    microbatch_of,
    patch_globals,
    stage_layers,
)

MODEL_MODULE = "sglang.srt.models.kimi_k3"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class StandInScoreProj(nn.Module):
    """``ReplicatedLinear(H, 1)`` stand-in: returns ``(x @ w, None)``, ``w`` fixed per seed."""

    def __init__(self, hidden_size: int, seed: int) -> None:
        super().__init__()
        weight = torch.linspace(-1.0, 1.0, hidden_size, dtype=DTYPE) * (seed + 1) / 7
        self.register_buffer("weight", weight.unsqueeze(-1))

    def forward(self, x):
        return x @ self.weight.to(x.dtype), None


class StandInScoreNorm(nn.Module):
    """``RMSNorm`` stand-in with one argument: ``x / (mean|x| + 1)``."""

    def forward(self, x):
        return x / (x.abs().mean(dim=-1, keepdim=True) + 1)


class StandInK3Layer(nn.Module):
    """K3 decoder-layer calling convention, returning ``(hidden, residual, sp_sharded)``.

    Materialises the pending add into the stream head, snapshots it into the
    attention-residual bank on block-write layers (as the real layer does), and returns
    ``(head * 0.5 + stamp, head)`` so the next consumer sees a pending add again.
    """

    def __init__(self, layer_id: int, hidden_size: int, block_size: int | None) -> None:
        super().__init__()
        self.layer_id = layer_id
        self._sp_moe = False
        if block_size is not None:
            self.is_block_write_layer = layer_id % block_size == 0
            self.prev_valid_blocks = _cdiv(layer_id, block_size)
            self.self_attention_res_proj = StandInScoreProj(hidden_size, layer_id)
            self.self_attention_res_norm = StandInScoreNorm()

    def forward(
        self,
        positions=None,
        hidden_states=None,
        forward_batch=None,
        residual=None,
        attn_res=None,
        **kwargs,
    ):
        head = hidden_states if residual is None else residual + hidden_states
        if attn_res is not None and self.is_block_write_layer:
            attn_res.write(head)
        stamp = (self.layer_id + 1) + 100.0 * microbatch_of(forward_batch)
        return head * 0.5 + stamp, head, False


class K3Stage(KimiStage):
    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        patch_globals(self.module, get_pp_group=lambda: self.group)
        forward_batch = SimpleNamespace(microbatch=mb)
        if self.group.is_first_rank:
            assert hidden_in is not None
            tokens, pp_proxy = hidden_in.shape[0], None
        else:
            assert proxy is not None
            tokens = proxy["hidden_states"].shape[0]
            pp_proxy = self.proxy_cls(dict(proxy))
        out = self.lm.forward(
            None,
            torch.arange(tokens),
            forward_batch,
            inputs_embeds=hidden_in if self.group.is_first_rank else None,
            pp_proxy_tensors=pp_proxy,
        )
        if not self.group.is_last_rank:
            return dict(out.tensors)
        aux = out.aux_hidden_states
        return out.hidden_states, list(aux) if aux is not None else []


def _eager_output_aggregation(attn_residual: Any) -> None:
    """The output-side aggregation without GPU kernels: the file's eager reference."""

    def aggregate_fused(prefix_sum, bank, nvb, score_proj, score_norm, out_norm):
        mixed = attn_residual.aggregate_stream_torch(prefix_sum, bank, nvb, score_proj, score_norm)
        return out_norm(mixed)

    attn_residual._FAST_SUPPORTED = False
    attn_residual._aggregate_fused = aggregate_fused


def k3_stage_factory(
    spec: Any, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> K3Stage:
    module = importlib.import_module(MODEL_MODULE)
    _eager_output_aggregation(importlib.import_module("sglang.srt.layers.attn_residual"))
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    num_layers = int(_spec(spec, "num_layers"))
    hidden_size = int(_spec(spec, "hidden_size", 4))
    block_size = _spec(spec, "attn_res_block_size")
    layer_ids = list(_spec(spec, "layer_ids"))
    group = FakePPGroup.for_transport(pp_rank, pp_size, dict(transport_kwargs or {}))
    patch_globals(
        module,
        get_pp_group=lambda: group,
        get_global_expert_distribution_recorder=NullExpertRecorder,
    )
    config = SimpleNamespace(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=32,
        rms_norm_eps=1e-6,
        attn_res_block_size=block_size,
    )
    start, end = get_pp_indices(num_layers, pp_rank, pp_size)

    model = bare(module.KimiK3LinearModel)
    model.config = config
    model.pp_group = group
    model.dspark_layers_to_capture = None
    if hasattr(module, "PPAuxTransport"):
        model.pp_aux_relay = None  # what the patched __init__ sets
    model._dp_attention = False
    model._trim_padded_attn = False
    model.embed_tokens = StandInEmbedding(hidden_size) if group.is_first_rank else PPMissingLayer()
    model.alt_streams = None
    model.layers = stage_layers(
        num_layers, start, end, PPMissingLayer, lambda i: StandInK3Layer(i, hidden_size, block_size)
    )
    model.start_layer, model.end_layer = start, end
    if group.is_last_rank:
        model.norm = StandInNorm()
        if block_size is not None:
            model.output_attn_res_norm = StandInScoreNorm()
            model.output_attn_res_proj = StandInScoreProj(hidden_size, num_layers)
    else:
        model.norm = PPMissingLayer()

    lm = bare(module.KimiK3LinearForCausalLM)
    lm.config = config
    lm.quant_config = None
    lm.model = model
    lm.pp_group = group
    lm.lm_head = nn.Identity() if group.is_last_rank else PPMissingLayer()
    lm.logits_processor = RecordingLogitsProcessor()
    lm.capture_aux_hidden_states = False
    if _spec(spec, "bypass_setter", False):
        lm.capture_aux_hidden_states = True
        model.dspark_layers_to_capture = list(layer_ids)
    else:
        lm.set_dspark_layers_to_capture(layer_ids)
    return K3Stage(lm, PPProxyTensors, group, module)
