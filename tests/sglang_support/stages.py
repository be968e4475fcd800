"""Pipeline stages of real SGLang causal-LM classes on CPU, without weights, from one table.

``stage_factory(spec, pp_rank, pp_size, transport_kwargs)`` (the stage-factory interface
of ``codemods.ppcheck``) imports ``sglang.srt.models.<spec["model"]>`` from whatever SGLang
tree is first on ``sys.path`` (a patched copy or the release as is), builds the stage's
decoder stack and causal LM the way SGLang's own CPU tests do (``object.__new__`` +
``nn.Module.__init__``, then the attributes ``__init__`` would set: :data:`SHAPES` says
which per model), with the shipped test utilities' stand-ins (``StandInLayer`` with
weights filled by name, ``StandInNorm``, ``RecordingLogitsProcessor``,
``StandInPPGroup``) and calls the file's real capture hook (``spec["hook"]``) with
``spec["layer_ids"]``.  Layer ranges come from SGLang's own ``get_pp_indices``.
``spec["construct"]`` builds through the file's ``EntryClass(config)`` instead (the
synthetic fixtures over the mini ``sglang`` tree); ``spec["bypass_setter"]`` stores the
ids on the stack as if the hook's PP guard were gone.

What runs is the release's (or the patched) code: the causal-LM ``forward``, the stack
``forward`` and SGLang's helpers it calls.  The stage's ``forward(mb, hidden_in, proxy)``
returns the handoff dict on non-last stages and ``(hidden_states, aux)`` on the last,
where ``aux`` is what the model handed the logits processor (``[]`` when it handed none);
``make_input(mb)`` is the first stage's input.
"""

from __future__ import annotations

import contextlib
import importlib
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from codemods.catalog.hooks import METHODS
from sglang_support.shipped_utils import shipped_test_utils

UTILS = shipped_test_utils()
#: The PP group model code reads (``rank_in_group``, ``is_last_rank``, ...).
FakePPGroup = UTILS.StandInPPGroup

#: Capture method family -> its hook (the catalog's one registry of capture methods).
HOOKS = {method.family: method.hook for method in METHODS}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class NullExpertRecorder:
    def __getattr__(self, name: str):
        return lambda *args, **kwargs: contextlib.nullcontext()


class _AttnTPContext:
    def maybe_input_scattered(self, forward_batch: Any):
        return contextlib.nullcontext()


class StandInScoreProj(nn.Module):
    """Kimi-K3's ``ReplicatedLinear(H, 1)``: ``(x @ w, None)``, ``w`` fixed per seed."""

    def __init__(self, hidden_size: int, seed: int) -> None:
        super().__init__()
        weight = torch.linspace(-1.0, 1.0, hidden_size) * (seed + 1) / 7
        self.register_buffer("weight", weight.unsqueeze(-1))

    def forward(self, x):
        return x @ self.weight.to(x.dtype), None


class StandInScoreNorm(nn.Module):
    """Kimi-K3's one-argument ``RMSNorm``: ``x / (mean|x| + 1)``."""

    def forward(self, x):
        return x / (x.abs().mean(dim=-1, keepdim=True) + 1)


class StandInK3Layer(UTILS.StandInLayer):
    """Kimi-K3's layer convention, ``(hidden, residual, sp_sharded)``: materialises the
    pending add into the stream head, snapshots it into the attention-residual bank on
    block-write layers (as the real layer does), and hands on a pending add again."""

    def __init__(self, layer_id: int, hidden_size: int, block_size: int | None) -> None:
        super().__init__(hidden_size, 2)
        self._sp_moe = False
        if block_size is not None:
            self.is_block_write_layer = layer_id % block_size == 0
            self.prev_valid_blocks = _cdiv(layer_id, block_size)
            self.self_attention_res_proj = StandInScoreProj(hidden_size, layer_id)
            self.self_attention_res_norm = StandInScoreNorm()

    def forward(
        self, positions=None, hidden_states=None, forward_batch=None, residual=None, **kwargs
    ):
        attn_res = kwargs.get("attn_res")
        head = hidden_states if residual is None else residual + hidden_states
        if attn_res is not None and self.is_block_write_layer:
            attn_res.write(head)
        return torch.tanh(head @ self.weight), head, False


def _eager_k3_aggregation(spec: dict, model: Any, last: bool) -> None:
    """The output-side aggregation without GPU kernels (the file's eager reference), and
    the output bank's stand-ins on the last stage."""
    attn_residual = importlib.import_module("sglang.srt.layers.attn_residual")

    def aggregate_fused(prefix_sum, bank, nvb, score_proj, score_norm, out_norm):
        mixed = attn_residual.aggregate_stream_torch(prefix_sum, bank, nvb, score_proj, score_norm)
        return out_norm(mixed)

    attn_residual._FAST_SUPPORTED = False
    attn_residual._aggregate_fused = aggregate_fused
    if last and spec.get("attn_res_block_size") is not None:
        model.output_attn_res_norm = StandInScoreNorm()
        model.output_attn_res_proj = StandInScoreProj(model.config.hidden_size, spec["num_layers"])


#: Per model file: the causal-LM and stack classes, the layer convention (``entry``:
#: capture at entry; ``pair``: the same returning ``(hidden, None)``; ``classic``:
#: ``(hidden, residual)``; ``k3``), and what the skipped constructors would set.
_ENTRY = dict(layer="entry", stack={}, lm={}, config={}, embedding="embed_tokens", norm="norm")
_KIMI = dict(
    _ENTRY,
    hook="dspark",
    missing_norm={},
    stack=dict(dspark_layers_to_capture=None, pp_aux_relay=None, alt_stream=None),
    config=dict(num_attention_heads=1),
)
SHAPES: dict[str, dict[str, Any]] = {
    "llama": dict(_ENTRY, classes=("LlamaForCausalLM", "LlamaModel")),
    "qwen2": dict(_ENTRY, classes=("Qwen2ForCausalLM", "Qwen2Model")),
    "qwen3": dict(_ENTRY, classes=("Qwen3ForCausalLM", "Qwen3Model")),
    "apertus": dict(_ENTRY, classes=("ApertusForCausalLM", "ApertusModel")),
    "laguna": dict(_ENTRY, classes=("LagunaForCausalLM", "LagunaModel")),
    "gpt_oss": dict(_ENTRY, classes=("GptOssForCausalLM", "GptOssModel")),
    "qwen3_moe": dict(_ENTRY, classes=("Qwen3MoeForCausalLM", "Qwen3MoeModel")),
    "exaone_moe": dict(_ENTRY, classes=("ExaoneMoEForCausalLM", "ExaoneMoEModel")),
    "minimax_m2": dict(_ENTRY, classes=("MiniMaxM2ForCausalLM", "MiniMaxM2Model")),
    # The layer range narrowed for two-batch overlap starts at the first MoE layer.
    "glm4_moe": dict(
        _ENTRY, classes=("Glm4MoeForCausalLM", "Glm4MoeModel"), stack=dict(first_k_dense_replace=0)
    ),
    "glm4_moe_lite": dict(
        _ENTRY,
        classes=("Glm4MoeLiteForCausalLM", "Glm4MoeLiteModel"),
        stack=dict(first_k_dense_replace=0),
    ),
    # Checks its layers' types against ``Layers``; its final norm is ``norm_f``.
    "nemotron_h": dict(
        _ENTRY, classes=("NemotronHForCausalLM", "NemotronHModel"), norm="norm_f", types="Layers"
    ),
    # No per-layer inputs (the stand-in embedding has none).
    "gemma4_causal": dict(
        _ENTRY,
        classes=("Gemma4ForCausalLM", "Gemma4TextModel"),
        stack=dict(project_per_layer_inputs=lambda embeds, per_layer: None),
    ),
    # Dense layers from 0 on, no expert-parallel all-gather of captures; ``config.mhc``
    # tested (0.5.21 hands those stages on as a bare ``PPProxyTensors``); its forward may
    # embed the ids itself: the first stage gets its input as the ids too.
    "glm5_next": dict(
        _ENTRY,
        classes=("Glm5NextForConditionalGeneration", "Glm5NextModel"),
        layer="pair",
        stack=dict(first_k_dense_replace=0, dflash_capture=False, enable_a2a_moe=False),
        config=dict(mhc=False, hc_mult=1),
        lm=dict(is_mrope_enabled=False),
        embeds_as_ids=True,
    ),
    # Not rewritten (it captures on the last rank only): driven as released.
    "bailing_moe_v3": dict(
        _ENTRY,
        classes=("BailingMoeV3ForCausalLM", "BailingMoELinearModel"),
        embedding="word_embeddings",
        stack=dict(capture_aux_hidden_states=False, layers_to_capture=None),
    ),
    "kimi_linear": dict(_KIMI, classes=("KimiLinearForCausalLM", "KimiLinearModel")),
    "kimi_k3": dict(
        _KIMI,
        classes=("KimiK3LinearForCausalLM", "KimiK3LinearModel"),
        layer="k3",
        stack=dict(
            dspark_layers_to_capture=None,
            pp_aux_relay=None,
            alt_streams=None,
            _dp_attention=False,
            _trim_padded_attn=False,
        ),
        config={},
        embeds_keyword="inputs_embeds",
        setup=_eager_k3_aggregation,
    ),
    # Stacks that pack their captures (``AuxHiddenStatePacker``).
    "deepseek_v2": dict(
        _ENTRY,
        classes=("DeepseekV2ForCausalLM", "DeepseekV2Model"),
        layer="pair",
        stack=dict(
            use_dsa=False,
            first_k_dense_replace=0,
            llama_4_scaling_config=None,
            next_full_attention_layer_id={},
        ),
    ),
    "mimo_v2": dict(
        _ENTRY, classes=("MiMoV2ForCausalLM", "MiMoV2Model"), lm=dict(_is_multimodal=False)
    ),
}
#: Module-level names replaced where the module has them.
GLOBALS = dict(
    get_global_expert_distribution_recorder=NullExpertRecorder,
    get_attn_tp_context=_AttnTPContext,
    check_cuda_graph_backend=lambda *args, **kwargs: True,
)


def _install(module: Any, group: Any) -> None:
    """The module-level names the model code reads, where the module has them, with
    ``group`` as the PP group (hooks ask ``get_pp_group()`` or ``get_parallel()``)."""
    names = dict(
        GLOBALS,
        get_pp_group=lambda: group,
        get_parallel=lambda: SimpleNamespace(pp_group=group),
    )
    for name, value in names.items():
        if hasattr(module, name):
            setattr(module, name, value)


def bare(cls: type) -> Any:
    """An instance of the ``nn.Module`` subclass ``cls`` without running its ``__init__``."""
    obj = object.__new__(cls)
    nn.Module.__init__(obj)
    return obj


def make_input(tokens: int, microbatch: int, hidden_size: int) -> torch.Tensor:
    """The first stage's input: the shipped stand-in embedding of ids distinct per token
    and microbatch."""
    ids = torch.arange(tokens) + 7 * tokens + 100 * microbatch
    return UTILS.StandInEmbedding(hidden_size)(ids)


def _layer(kind: str, i: int, hidden_size: int, spec: dict) -> nn.Module:
    if kind == "k3":
        return StandInK3Layer(i, hidden_size, spec.get("attn_res_block_size"))
    return UTILS.StandInLayer(hidden_size, 2, entry=kind != "classic", pair=kind == "pair")


class Stage:
    """One pipeline stage around a real causal-LM instance."""

    def __init__(self, lm: Any, module: Any, group: Any, shape: dict, spec: dict) -> None:
        from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

        self.lm, self.module, self.group, self.shape = lm, module, group, shape
        self.proxy_cls = PPProxyTensors
        self.tokens, self.hidden_size = spec.get("tokens"), _hidden(spec)

    def make_input(self, mb: int) -> torch.Tensor:
        return make_input(self.tokens[mb], mb, self.hidden_size)

    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        # Several stages may share one process: this stage's group for this call.
        _install(self.module, self.group)
        first = self.group.is_first_rank
        tokens = hidden_in.shape[0] if first else proxy["hidden_states"].shape[0]
        batch = SimpleNamespace(
            microbatch=mb,
            residual_stream=None,
            can_run_tbo=False,
            reuse_dsa_topk_indices=False,
            spec_info=None,
            return_hidden_states_before_norm=False,
            contains_mm_inputs=lambda: False,
            input_embeds=None,
            capture_hidden_mode=SimpleNamespace(need_capture=lambda: True),
            forward_mode=SimpleNamespace(
                is_idle=lambda: False, is_decode=lambda: False, is_target_verify=lambda: False
            ),
        )
        ids = hidden_in if self.shape.get("embeds_as_ids") else None
        kwargs = {"pp_proxy_tensors": None if first else self.proxy_cls(dict(proxy))}
        args = [ids, torch.arange(tokens), batch]
        embeds = hidden_in if first else None
        if "embeds_keyword" in self.shape:
            kwargs[self.shape["embeds_keyword"]] = embeds
        else:
            args.append(embeds)
        with torch.no_grad():
            out = self.lm.forward(*args, **kwargs)
        if not self.group.is_last_rank:
            # 0.5.21's to_pp also sends ``"residual": None``: nothing to transfer.
            return {key: value for key, value in out.tensors.items() if value is not None}
        aux = out.aux_hidden_states
        return out.hidden_states, aux if aux is not None else []


def _hidden(spec: dict) -> int:
    return int(spec.get("hidden_size", spec.get("hidden", 8)))


def _constructed(module: Any, spec: dict, group: Any) -> Any:
    """``EntryClass(config)`` of a file whose constructors run on CPU as they are."""
    importlib.import_module("sglang.srt.distributed").set_pp_group(group)
    module.get_pp_group = lambda: group
    config = SimpleNamespace(
        num_hidden_layers=int(spec["num_layers"]),
        hidden_size=_hidden(spec),
        vocab_size=32,
        pad_token_id=0,
        dtype=torch.float32,
    )
    return module.EntryClass(config)


def _assembled(module: Any, shape: dict, spec: dict, group: Any, pp_rank: int, pp_size: int):
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer

    lm_name, stack_name = shape["classes"]
    num_layers, hidden_size = int(spec["num_layers"]), _hidden(spec)
    config = SimpleNamespace(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=32,
        pad_token_id=0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        encoder_only=False,
        dtype=torch.float32,
        attn_res_block_size=spec.get("attn_res_block_size"),
        **{**shape["config"], **spec.get("config", {})},
    )
    start, end = get_pp_indices(num_layers, pp_rank, pp_size)
    first, last = group.is_first_rank, group.is_last_rank
    model = bare(getattr(module, stack_name))
    model.config, model.pp_group = config, group
    model.padding_idx, model.vocab_size = config.pad_token_id, config.vocab_size
    embedding = nn.Identity() if shape.get("embeds_as_ids") else UTILS.StandInEmbedding(hidden_size)
    setattr(model, shape["embedding"], embedding if first else PPMissingLayer())
    kind = spec.get("layers", shape["layer"])
    model.layers = nn.ModuleList(
        _layer(kind, i, hidden_size, spec) if start <= i < end else PPMissingLayer()
        for i in range(num_layers)
    )
    model.start_layer, model.end_layer = start, end
    missing_norm = PPMissingLayer(**shape.get("missing_norm", {"return_tuple": True}))
    setattr(model, shape["norm"], UTILS.StandInNorm() if last else missing_norm)
    known = getattr(module, shape.get("types", ""), None)
    if known is not None and UTILS.StandInLayer not in known:
        setattr(module, shape["types"], (*known, UTILS.StandInLayer))
    model.layers_to_capture = []
    for attribute, value in shape["stack"].items():
        setattr(model, attribute, value)
    if "setup" in shape:
        shape["setup"](spec, model, last)

    lm = bare(getattr(module, lm_name))
    lm.config, lm.quant_config, lm.pp_group, lm.model = config, None, group, model
    if not isinstance(getattr(type(lm), "start_layer", None), property):
        lm.start_layer, lm.end_layer = start, end
    lm.lm_head = nn.Identity() if last else PPMissingLayer()
    lm.logits_processor = UTILS.RecordingLogitsProcessor()
    lm.capture_aux_hidden_states = False
    for attribute, value in shape["lm"].items():
        setattr(lm, attribute, value)
    UTILS.fill_weights(lm)
    return lm


def stage_factory(spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None):
    """The stage ``pp_rank`` of ``pp_size`` of ``spec["model"]`` (see the module text)."""
    name = spec.get("model", "kimi_linear")
    shape = SHAPES[name]
    module = importlib.import_module(f"sglang.srt.models.{name}")
    kwargs = dict(transport_kwargs or {})
    group = FakePPGroup(pp_rank, pp_size, kwargs.get("group"))
    group.device_group = kwargs.get("direct_group")
    group.ranks = list(kwargs.get("ranks") or range(pp_size))
    _install(module, group)
    if spec.get("construct"):
        lm = _constructed(module, spec, group)
    else:
        lm = _assembled(module, shape, spec, group, pp_rank, pp_size)
    ids = spec.get("layer_ids")
    if spec.get("bypass_setter"):
        lm.capture_aux_hidden_states = True
        lm.model.dspark_layers_to_capture = list(ids)
    else:
        getattr(lm, HOOKS[spec.get("hook", shape.get("hook"))])(None if ids is None else list(ids))
    return Stage(lm, module, group, shape, spec)
