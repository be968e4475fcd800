"""Pipeline stages of real SGLang 0.5.22+ causal-LM classes whose decoder stack captures
through a callback at layer entry (``capture_output=aux_hidden_states.capture``).

``entry_stage_factory(spec, pp_rank, pp_size, transport_kwargs)`` is a stage factory for
``drive.drive``: it imports the model module named by ``spec["model"]`` (``llama``,
``qwen2``, ``qwen3``, ...) from whatever SGLang tree is first on ``sys.path`` (a patched
copy or the release as is), builds the stage's decoder stack and causal-LM instance without
running their constructors (``stages.bare``), with :class:`StampEntryLayer` stand-ins for
the decoder layers (which capture at entry through the callback or, for the gathered
collector, into the list handed to flagged layers), and calls the file's real capture
hook (``spec["hook"]``: ``set_eagle3_layers_to_capture`` or
``set_dflash_layers_to_capture``) with
``spec["layer_ids"]`` (``None``: the hook's default layers).  Layer ranges come from
SGLang's own ``get_pp_indices``.

What runs is the release's (or the patched) code: the causal-LM ``forward``, the stack
``forward`` with its ``AuxHiddenStateList``, SGLang's ``residual_batch.start`` /
``to_pp`` / ``final_norm`` and ``PPProxyTensors``.  Only the layers, the final norm, the
embedding and the logits processor are stand-ins.

The stage's ``forward(mb, hidden_in, proxy)`` returns the handoff dict on non-last stages
and ``(hidden_states, aux)`` on the last, where ``aux`` is the container the model handed
the logits processor (``[]`` when it handed none).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from sglang_support.stages import (
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

#: model file stem -> (causal-LM class, decoder-stack class) of that file.
CLASSES = {
    "llama": ("LlamaForCausalLM", "LlamaModel"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Model"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Model"),
    "apertus": ("ApertusForCausalLM", "ApertusModel"),
    "laguna": ("LagunaForCausalLM", "LagunaModel"),
    "gpt_oss": ("GptOssForCausalLM", "GptOssModel"),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "Qwen3MoeModel"),
    "exaone_moe": ("ExaoneMoEForCausalLM", "ExaoneMoEModel"),
    "minimax_m2": ("MiniMaxM2ForCausalLM", "MiniMaxM2Model"),
    "glm4_moe": ("Glm4MoeForCausalLM", "Glm4MoeModel"),
    "glm4_moe_lite": ("Glm4MoeLiteForCausalLM", "Glm4MoeLiteModel"),
    "nemotron_h": ("NemotronHForCausalLM", "NemotronHModel"),
    "gemma4_causal": ("Gemma4ForCausalLM", "Gemma4TextModel"),
    "glm5_next": ("Glm5NextForConditionalGeneration", "Glm5NextModel"),
    # Not rewritten (it captures on the last rank only): driven as released, to show
    # what PP loses.
    "bailing_moe_v3": ("BailingMoeV3ForCausalLM", "BailingMoELinearModel"),
    # Its own DSPARK relay (0.5.22+), rewritten onto the shipped helpers.
    "kimi_linear": ("KimiLinearForCausalLM", "KimiLinearModel"),
}
#: Decoder stacks that check their layers' types against a module-level tuple, and
#: name their final norm otherwise than ``norm``.
LAYER_TYPE_TUPLES = {"nemotron_h": "Layers"}
NORM_ATTRIBUTES = {"nemotron_h": "norm_f"}
#: Decoder-stack attributes a forward reads (its constructor is skipped): the layer
#: range narrowed for two-batch overlap starts at the first MoE layer.
STACK_ATTRIBUTES = {
    "kimi_linear": {"dspark_layers_to_capture": None},
    "glm4_moe": {"first_k_dense_replace": 0},
    "glm4_moe_lite": {"first_k_dense_replace": 0},
    # No per-layer inputs (the stand-in embedding has none).
    "gemma4_causal": {"project_per_layer_inputs": lambda embeds, per_layer: None},
    # Dense layers from 0 on (the TBO split point), no expert-parallel all-gather of
    # captures; the DFLASH hook sets ``dflash_capture`` itself.
    "glm5_next": {"first_k_dense_replace": 0, "dflash_capture": False, "enable_a2a_moe": False},
    # What its constructor sets; the DSPARK hook sets both on the last rank only.
    "bailing_moe_v3": {"capture_aux_hidden_states": False, "layers_to_capture": None},
}
#: Config fields a forward reads besides the sizes (``spec["config"]`` overrides them):
#: glm5_next tests ``config.mhc`` (hyper-connections; 0.5.21 hands those stages on as a
#: bare ``PPProxyTensors``).
CONFIG_FIELDS = {"glm5_next": {"mhc": False, "hc_mult": 1}}
#: Causal-LM attributes a forward reads (its constructor is skipped).
LM_ATTRIBUTES = {"glm5_next": {"is_mrope_enabled": False}}
#: Decoder stacks that name their embedding otherwise than ``embed_tokens``.
EMBEDDING_ATTRIBUTES = {"bailing_moe_v3": "word_embeddings"}
#: Decoder layers that return ``(hidden_states, topk_indices)``.
PAIR_LAYERS = {"glm5_next"}
#: Causal-LM forwards that may embed the ids themselves (glm5_next on 0.5.21 always
#: goes through ``general_mm_embed_routine``): the first stage gets its input as the
#: ids too, and the embedding hands them on as they are.
EMBEDS_AS_IDS = {"glm5_next"}
HOOKS = {
    "eagle3": "set_eagle3_layers_to_capture",
    "dflash": "set_dflash_layers_to_capture",
    "dspark": "set_dspark_layers_to_capture",
}


class _EntryBoundary:
    """The ``attn_boundary`` of a layer: ``from_pp`` restores the residual stream the way
    SGLang's does for a handoff without a separate residual (fresh stream, the hidden
    states as sent)."""

    def from_pp(self, tensors: Any, forward_batch: Any, **kwargs: Any) -> torch.Tensor:
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        residual_batch.start(forward_batch)
        return tensors["hidden_states"]

    def capture_output(self, hidden_states: Any, forward_batch: Any) -> tuple:
        """The explicit snapshot at layer entry (nemotron_h): the handle goes on, a
        snapshot of the residual stream is captured."""
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        return hidden_states, residual_batch.snapshot(hidden_states, forward_batch)


class StampEntryLayer(nn.Module):
    """``h -> h * 0.5 + stamp``; hands its input to ``capture_output`` at entry, as
    SGLang's 0.5.22+ decoder layers do (``attn_boundary.prepare(..., capture=...)``).

    The stamp holds the layer id and the microbatch, so a capture taken at the wrong
    layer, in the wrong order or from another microbatch differs exactly.
    """

    def __init__(self, layer_id: int, pair: bool = False) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.pair = pair
        self.attn_boundary = _EntryBoundary()
        self.boundary = self.attn_boundary

    def forward(
        self,
        positions=None,
        hidden_states=None,
        forward_batch=None,
        *extra,
        capture_output=None,
        captured_last_layer_outputs=None,
        **kwargs,
    ):
        if capture_output is not None:
            capture_output(hidden_states)
        if captured_last_layer_outputs is not None:  # the gathered collector
            captured_last_layer_outputs.capture(hidden_states)
        stamp = (self.layer_id + 1) + 100.0 * microbatch_of(forward_batch)
        out = hidden_states * 0.5 + stamp
        return (out, None) if self.pair else out


class EntryStage:
    """One pipeline stage around a real causal-LM instance."""

    def __init__(
        self, lm: Any, proxy_cls: type, group: FakePPGroup, embeds_as_ids: bool = False
    ) -> None:
        self.lm = lm
        self.proxy_cls = proxy_cls
        self.group = group
        self.embeds_as_ids = embeds_as_ids

    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        forward_batch = SimpleNamespace(
            microbatch=mb,
            residual_stream=None,
            can_run_tbo=False,
            contains_mm_inputs=lambda: False,
            input_embeds=None,
            capture_hidden_mode=SimpleNamespace(need_capture=lambda: True),
            forward_mode=SimpleNamespace(
                is_idle=lambda: False, is_decode=lambda: False, is_target_verify=lambda: False
            ),
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
            hidden_in if self.embeds_as_ids else None,
            torch.arange(tokens),
            forward_batch,
            hidden_in if self.group.is_first_rank else None,
            pp_proxy_tensors=pp_proxy,
        )
        if not self.group.is_last_rank:
            # 0.5.21's to_pp also sends ``"residual": None`` when the stream holds no
            # separate residual (the stand-in layers keep none): nothing to transfer.
            return {key: value for key, value in out.tensors.items() if value is not None}
        aux = out.aux_hidden_states
        return out.hidden_states, aux if aux is not None else []


def entry_stage_factory(
    spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> EntryStage:
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    name = spec["model"]
    module = importlib.import_module(f"sglang.srt.models.{name}")
    lm_name, stack_name = CLASSES[name]
    num_layers = int(spec["num_layers"])
    hidden_size = int(spec["hidden_size"])
    group = FakePPGroup.for_transport(pp_rank, pp_size, dict(transport_kwargs or {}))
    patch_globals(module, get_global_expert_distribution_recorder=NullExpertRecorder)
    if hasattr(module, "get_parallel"):
        # Hooks that ask ``get_parallel().pp_group`` (exaone_moe, minimax_m2) see this
        # stage's group.
        patch_globals(module, get_parallel=lambda: SimpleNamespace(pp_group=group))
    config = SimpleNamespace(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=32,
        pad_token_id=0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    )
    for field, value in {**CONFIG_FIELDS.get(name, {}), **spec.get("config", {})}.items():
        setattr(config, field, value)
    start, end = get_pp_indices(num_layers, pp_rank, pp_size)
    model = bare(getattr(module, stack_name))
    model.config = config
    model.padding_idx = config.pad_token_id
    model.vocab_size = config.vocab_size
    model.pp_group = group
    embedding = nn.Identity() if name in EMBEDS_AS_IDS else StandInEmbedding(hidden_size)
    setattr(
        model,
        EMBEDDING_ATTRIBUTES.get(name, "embed_tokens"),
        embedding if group.is_first_rank else PPMissingLayer(),
    )
    pair = name in PAIR_LAYERS
    model.layers = stage_layers(
        num_layers, start, end, PPMissingLayer, lambda i: StampEntryLayer(i, pair)
    )
    model.start_layer, model.end_layer = start, end
    norm = StandInNorm() if group.is_last_rank else PPMissingLayer(return_tuple=True)
    setattr(model, NORM_ATTRIBUTES.get(name, "norm"), norm)
    if name in LAYER_TYPE_TUPLES:
        known = getattr(module, LAYER_TYPE_TUPLES[name])
        if StampEntryLayer not in known:
            setattr(module, LAYER_TYPE_TUPLES[name], (*known, StampEntryLayer))
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
    return EntryStage(lm, PPProxyTensors, group, name in EMBEDS_AS_IDS)
