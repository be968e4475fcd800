"""Pipeline stages of real SGLang 0.5.21+ causal-LM classes whose decoder stack packs its
captures (``AuxHiddenStatePacker``, the gathered collector handed to the layers whose id
is a capture id): deepseek_v2 and mimo_v2 (whose last stage also captures its own output
when ``num_hidden_layers`` is a capture id, and whose causal-LM forward returns
``(hidden_states, hidden_states_before_norm[, aux])``).

``packer_stage_factory(spec, pp_rank, pp_size, transport_kwargs)`` is a stage factory for
``drive.drive``, built like ``entry_stage.entry_stage_factory``: the module named by
``spec["model"]`` is imported from the SGLang tree first on ``sys.path`` (a patched copy
or the release as is), the stage's decoder stack and causal-LM instance are made without
their constructors, with stand-in layers (:class:`StampPackerLayer`, which capture their
input at entry into the collector they are handed, as SGLang's ``attn_boundary.prepare
(capture_gathered=...)`` does), and the file's real capture hook is called.

What runs is the release's (or the patched) code: the causal-LM ``forward``, the stack
``forward`` with its ``AuxHiddenStatePacker`` and ``finalize()``, SGLang's
``residual_batch`` helpers, ``IndexTopKShareState``, ``BumpAllocator`` and
``PPProxyTensors``.  Only the layers, the final norm, the embedding, the logits processor,
the expert recorder, the attention-TP context and the CUDA-graph backend query are
stand-ins.

The stage's ``forward(mb, hidden_in, proxy)`` returns the handoff dict on non-last stages
and ``(hidden_states, aux)`` on the last, where ``aux`` is what the model handed the logits
processor: the packed ``[tokens, K * hidden]`` tensor, or ``[]`` when it handed none.
"""

from __future__ import annotations

import contextlib
import importlib
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from sglang_support.entry_stage import HOOKS, StampEntryLayer
from sglang_support.stages import (
    FakePPGroup,
    NullExpertRecorder,
    RecordingLogitsProcessor,
    StandInEmbedding,
    StandInNorm,
    bare,
    patch_globals,
    stage_layers,
)

#: model file stem -> (causal-LM class, decoder-stack class) of that file.
CLASSES = {
    "deepseek_v2": ("DeepseekV2ForCausalLM", "DeepseekV2Model"),
    "mimo_v2": ("MiMoV2ForCausalLM", "MiMoV2Model"),
}
#: Causal-LM attributes the forward reads: a text-only model.
LM_ATTRIBUTES = {
    "mimo_v2": {"_is_multimodal": False},
}
#: Decoder-stack attributes the forward reads (its constructor is skipped): no DSA
#: indexer, no dense prefix narrowed away for two-batch overlap, no Llama-4 scaling.
STACK_ATTRIBUTES = {
    "mimo_v2": {},
    "deepseek_v2": {
        "use_dsa": False,
        "first_k_dense_replace": 0,
        "llama_4_scaling_config": None,
        "next_full_attention_layer_id": {},
    },
}


class StampPackerLayer(StampEntryLayer):
    """:class:`StampEntryLayer` returning ``(hidden_states, topk_indices)`` as
    deepseek_v2's decoder layers do (no top-k indices: no DSA indexer)."""

    def forward(self, positions=None, hidden_states=None, forward_batch=None, *extra, **kwargs):
        return super().forward(positions, hidden_states, forward_batch, **kwargs), None


#: Models whose decoder layers return ``(hidden_states, topk_indices)``.
TUPLE_LAYERS = {"deepseek_v2"}


class _AttnTPContext:
    def maybe_input_scattered(self, forward_batch: Any):
        return contextlib.nullcontext()


class PackerStage:
    """One pipeline stage around a real causal-LM instance."""

    def __init__(self, lm: Any, proxy_cls: type, group: FakePPGroup) -> None:
        self.lm = lm
        self.proxy_cls = proxy_cls
        self.group = group

    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        forward_batch = SimpleNamespace(
            microbatch=mb,
            residual_stream=None,
            can_run_tbo=False,
            reuse_dsa_topk_indices=False,
            spec_info=None,
            return_hidden_states_before_norm=False,
            forward_mode=SimpleNamespace(is_idle=lambda: False),
        )
        if self.group.is_first_rank:
            assert hidden_in is not None
            tokens = hidden_in.shape[0]
            pp_proxy = None
        else:
            assert proxy is not None
            tokens = proxy["hidden_states"].shape[0]
            pp_proxy = self.proxy_cls(dict(proxy))
        out = self.lm.forward(
            None,
            torch.arange(tokens),
            forward_batch,
            hidden_in if self.group.is_first_rank else None,
            pp_proxy_tensors=pp_proxy,
        )
        if not self.group.is_last_rank:
            return {key: value for key, value in out.tensors.items() if value is not None}
        aux = out.aux_hidden_states
        return out.hidden_states, aux if aux is not None else []


def packer_stage_factory(
    spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> PackerStage:
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    name = spec["model"]
    module = importlib.import_module(f"sglang.srt.models.{name}")
    lm_name, stack_name = CLASSES[name]
    num_layers = int(spec["num_layers"])
    hidden_size = int(spec["hidden_size"])
    group = FakePPGroup.for_transport(pp_rank, pp_size, dict(transport_kwargs or {}))
    patch_globals(
        module,
        get_global_expert_distribution_recorder=NullExpertRecorder,
        get_attn_tp_context=_AttnTPContext,
        check_cuda_graph_backend=lambda *args, **kwargs: True,
    )
    config = SimpleNamespace(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=32,
        pad_token_id=0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        encoder_only=False,
    )
    start, end = get_pp_indices(num_layers, pp_rank, pp_size)
    model = bare(getattr(module, stack_name))
    model.config = config
    model.padding_idx = config.pad_token_id
    model.vocab_size = config.vocab_size
    model.pp_group = group
    model.embed_tokens = StandInEmbedding(hidden_size) if group.is_first_rank else PPMissingLayer()
    layer_class = StampPackerLayer if name in TUPLE_LAYERS else StampEntryLayer
    model.layers = stage_layers(num_layers, start, end, PPMissingLayer, layer_class)
    model.start_layer, model.end_layer = start, end
    model.norm = StandInNorm() if group.is_last_rank else PPMissingLayer(return_tuple=True)
    model.layers_to_capture = []
    for attribute, value in STACK_ATTRIBUTES.get(name, {}).items():
        setattr(model, attribute, value)

    lm = bare(getattr(module, lm_name))
    lm.config = config
    lm.quant_config = None
    lm.pp_group = group
    lm.model = model
    lm.lm_head = nn.Identity() if group.is_last_rank else PPMissingLayer()
    lm.logits_processor = RecordingLogitsProcessor()
    lm.capture_aux_hidden_states = False
    for attribute, value in LM_ATTRIBUTES.get(name, {}).items():
        setattr(lm, attribute, value)
    getattr(lm, HOOKS[spec["hook"]])(spec["layer_ids"])
    return PackerStage(lm, PPProxyTensors, group)
