"""Build patched causal LMs through their real ``__init__`` as 2 PP stages (gloo, CPU)
and report the width of the aux entry each stage says it receives.

Usage: ``python -m sglang_support.width_check [MODEL ...]`` with a patched SGLang tree on
``PYTHONPATH`` (see ``env.sglang_env``); ``MODEL`` names keys of ``MODELS`` (default:
all).  The parent imports the model modules once and forks two ranks; each rank
initialises SGLang's distributed environment and model-parallel groups (gloo,
``tp_size=1``, ``pp_size=2``) the way SGLang's own CPU layer tests do, then for every
model builds the causal LM with a tiny config (``num_hidden_layers=4``,
``hidden_size=64``), calls its capture hook (EAGLE3, else DFLASH, else DSPARK; see
``HOOKS``) with one capture on each stage and records the width the runner's
``misc_utils.resolve_pp_proxy_aux_hidden_size`` gives (the helpers' one lookup);
then stage 0 hands captures as wide as the hidden states to stage 1 in the
``aux_hidden_states`` entry ``pp_aux_outgoing`` makes (over a gloo send) and stage 1
collects them with ``pp_aux_collect``.  The ranks agree after each build and each hook (a failure on either
rank skips what follows on both), so a failure never leaves a peer waiting in the
hook's handshake or the handoff; the parent gives up after ``--timeout`` seconds.

Prints one JSON line: ``{"records": [...], "errors": [...]}``; a record per model and
rank: ``model``, ``cls``, ``rank``, ``width``, ``earlier`` (the capture ids, as the hook
keeps them, that stages before this one take), ``received`` (how many captures the relay
expects from earlier stages), ``ids`` (the capture ids this stage takes, as the relay
keeps them), ``stack`` (the decoder stack's class), on stage 1 ``sent`` (the
width of the entry stage 0 handed over) and ``collected`` (see ``_handoff``), and
``error`` where something raised.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import os
import queue
import socket
import sys
import traceback
from typing import Any

import torch

HIDDEN = 64
NUM_LAYERS = 4
PP_SIZE = 2
TOKENS = 3
AUX_ENTRY = "aux_hidden_states"
#: Hook arguments: one capture on each stage of the 4 layers (stage 0 runs [0, 2)),
#: whether the hook shifts the ids by one (EAGLE3's "after layer i") or not.
CAPTURE_IDS = [0, 2]

_COMMON = dict(
    vocab_size=128,
    hidden_size=HIDDEN,
    intermediate_size=96,
    num_hidden_layers=NUM_LAYERS,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    hidden_act="silu",
    tie_word_embeddings=False,
)
#: The only rope scaling SGLang's MLA attention builds on CPU.
_DEEPSEEK_YARN = dict(
    rope_type="deepseek_yarn",
    factor=1.0,
    original_max_position_embeddings=256,
    beta_fast=32,
    beta_slow=1,
    mscale=1.0,
    mscale_all_dim=1.0,
)

#: DeepSeek-style routed experts, shared by the tiny MoE configs below.
_DEEPSEEK_MOE = dict(
    n_routed_experts=4,
    num_experts_per_tok=2,
    n_shared_experts=1,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
)
#: DeepSeek-style latent attention (MLA) with the rope scaling it builds on CPU.
_DEEPSEEK_MLA = dict(
    q_lora_rank=32,
    kv_lora_rank=32,
    qk_nope_head_dim=16,
    qk_rope_head_dim=16,
    v_head_dim=16,
    num_key_value_heads=4,
    rope_scaling=_DEEPSEEK_YARN,
    moe_layer_freq=1,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
)

#: A vision tower narrower than the text stack (a width taken from it would show).
_CLIP = dict(
    model_type="clip_vision_model",
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
    num_channels=3,
    hidden_act="gelu",
    layer_norm_eps=1e-5,
    img_token_compression_config={},
    position_embedding_type="rope",
    rope_mode="3d",
    rope_theta=10000.0,
    vision_segment_max_frames=None,
)

#: model key -> (module, causal-LM class, config class, fields); the config class is
#: transformers' (a name), SGLang's (``"<sglang.srt.configs module>.<Class>"``) or
#: ``PretrainedConfig`` (None).  The fields are what the constructor reads, on top of
#: ``_COMMON``; a ``text_config`` naming another key nests that model's config.  Hybrid
#: stacks are built with attention layers only (qwen3_5_text: full attention every
#: layer; nemotron_h: attention and MLP layers, no Mamba; bailing_moe_v3: no linear
#: attention layer); deepseek_v4's layers all compress (ratio 4: the rope SGLang builds
#: on CPU); qwen3_vl is built ``language_model_only`` (no vision tower); the other
#: multimodal models build a small one.
MODELS: dict[str, tuple[str, str, str | None, dict[str, Any]]] = {
    "llama": ("llama", "LlamaForCausalLM", "LlamaConfig", {}),
    "gpt_oss": (
        "gpt_oss",
        "GptOssForCausalLM",
        "GptOssConfig",
        dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=16, swiglu_limit=7.0),
    ),
    "minimax_m3": (
        "minimax_m3",
        "MiniMaxM3SparseForCausalLM",
        None,
        dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=0,
            dense_intermediate_size=96,
            swiglu_limit=7.0,
            swiglu_alpha=1.702,
            num_mtp_modules=0,
            scoring_func="sigmoid",
            sparse_attention_config=None,
        ),
    ),
    "minimax_m3_vl": (
        "minimax_m3_vl",
        "MiniMaxM3SparseForConditionalGeneration",
        "minimax_vl.MiniMaxM3VLConfig",
        dict(text_config="minimax_m3", vision_config=_CLIP, encoder_only=False),
    ),
    "qwen3_5_text": (
        "qwen3_5_text",
        "Qwen3_5ForCausalLM",
        "qwen3_5.Qwen3_5TextConfig",
        dict(
            full_attention_interval=1,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    "nemotron_h": (
        "nemotron_h",
        "NemotronHForCausalLM",
        "nemotron_h.NemotronHConfig",
        dict(hybrid_override_pattern="*-*-"),
    ),
    "gemma4_causal": (
        "gemma4_causal",
        "Gemma4ForCausalLM",
        "Gemma4TextConfig",
        # Full-attention layers shaped as the sliding ones (transformers 5.19, which
        # 0.5.22+ pin, refuses the global head_dim of a config whose shapes differ).
        dict(
            hidden_act="gelu_pytorch_tanh",
            hidden_size_per_layer_input=0,
            global_head_dim=16,
            num_global_key_value_heads=2,
        ),
    ),
    "bailing_moe": (
        "bailing_moe",
        "BailingMoEForCausalLM",
        None,
        dict(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=32,
            num_shared_experts=1,
            first_k_dense_replace=1,
            embedding_dropout=0.0,
            norm_head=False,
            norm_topk_prob=True,
            use_bias=False,
            use_qkv_bias=False,
            num_nextn_predict_layers=0,
            partial_rotary_factor=1.0,
            rotary_dim=16,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
        ),
    ),
    "mimo_v2": (
        "mimo_v2",
        "MiMoV2ForCausalLM",
        None,
        dict(
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            moe_layer_freq=[0, 1, 1, 1],
            encoder_only=False,
            attention_bias=False,
            layernorm_epsilon=1e-6,
            hybrid_layer_pattern=[0] * NUM_LAYERS,
            n_group=1,
            topk_group=1,
            topk_method="noaux_tc",
            scoring_func="sigmoid",
            norm_topk_prob=True,
            scale_emb=1.0,
            output_format=None,
            sliding_window_size=16,
            swa_head_dim=16,
            swa_num_attention_heads=4,
            swa_num_key_value_heads=2,
        ),
    ),
    "qwen2_5_vl": (
        "qwen2_5_vl",
        "Qwen2_5_VLForConditionalGeneration",
        None,
        dict(
            encoder_only=False,
            rope_scaling=dict(rope_type="default", mrope_section=[4, 2, 2]),
            vision_config=dict(
                depth=1,
                hidden_size=32,
                intermediate_size=64,
                num_heads=2,
                out_hidden_size=HIDDEN,
                patch_size=14,
                spatial_merge_size=2,
                temporal_patch_size=2,
                in_channels=3,
                in_chans=3,
                window_size=112,
                fullatt_block_indexes=[0],
                hidden_act="silu",
            ),
        ),
    ),
    "qwen3_vl": (
        "qwen3_vl",
        "Qwen3VLForConditionalGeneration",
        "qwen3_vl.Qwen3VLConfig",
        dict(
            text_config={},
            vision_config=dict(deepstack_visual_indexes=[]),
            language_model_only=True,
            attention_bias=False,
        ),
    ),
    "deepseek_v4": (
        "deepseek_v4",
        "DeepseekV4ForCausalLM",
        "deepseek_v4.DeepSeekV4Config",
        dict(
            architectures=["DeepseekV4ForCausalLM"],
            quantization_config={},
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            n_group=1,
            topk_group=1,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=32,
            o_lora_rank=32,
            o_groups=2,
            index_head_dim=16,
            index_n_heads=2,
            num_key_value_heads=1,
            compress_ratios=[4] * NUM_LAYERS,
            rope_scaling=_DEEPSEEK_YARN,
            kv_source_layer_ids=[],
            index_source_layer_ids=[],
            engram_layer_ids=[],
            engram_num_embeddings=[],
        ),
    ),
    "glm5_next": (
        "glm5_next",
        "Glm5NextForConditionalGeneration",
        "glm5_next.Glm5NextConfig",
        dict(
            text_config={},
            vision_config=dict(
                depth=1,
                hidden_size=32,
                num_heads=2,
                intermediate_size=64,
                out_hidden_size=HIDDEN,
                patch_size=14,
                spatial_merge_size=2,
                temporal_patch_size=2,
                in_channels=3,
                swiglu_limit=7.0,
            ),
        ),
    ),
    "bailing_moe_v3": (
        "bailing_moe_v3",
        "BailingMoeV3ForCausalLM",
        None,
        dict(
            layer_group_size=[0] * NUM_LAYERS,
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            q_lora_rank=32,
            kv_lora_rank=32,
            qk_nope_head_dim=16,
            qk_rope_head_dim=16,
            v_head_dim=16,
            num_key_value_heads=4,
            num_nextn_predict_layers=0,
            partial_rotary_factor=1.0,
            rotary_dim=16,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0),
            use_bias=False,
            use_qkv_bias=False,
            weight_block_size=None,
            short_conv_kernel_size=4,
            kda_lower_bound=None,
            kda_safe_gate=False,
            no_kda_lora=False,
            attention_type="mla",
        ),
    ),
    "gemma4_mm": (
        "gemma4_mm",
        "Gemma4ForConditionalGeneration",
        "Gemma4Config",
        dict(
            text_config="gemma4_causal",
            vision_config=dict(
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=2,
                head_dim=16,
            ),
        ),
    ),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", "Qwen2Config", {}),
    "qwen3": ("qwen3", "Qwen3ForCausalLM", "Qwen3Config", {}),
    "qwen2_moe": (
        "qwen2_moe",
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        dict(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
        ),
    ),
    "qwen3_moe": (
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
    ),
    "glm4_moe": (
        "glm4_moe",
        "Glm4MoeForCausalLM",
        "Glm4MoeConfig",
        dict(_DEEPSEEK_MOE),
    ),
    "deepseek_v2": (
        "deepseek_v2",
        "DeepseekV2ForCausalLM",
        "DeepseekV3Config",
        dict(**_DEEPSEEK_MOE, **_DEEPSEEK_MLA),
    ),
    "apertus": (
        "apertus",
        "ApertusForCausalLM",
        "ApertusConfig",
        dict(hidden_act="xielu"),
    ),
    "minimax_m2": (
        "minimax_m2",
        "MiniMaxM2ForCausalLM",
        "MiniMaxM2Config",
        dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            rotary_dim=16,
            scoring_func="sigmoid",
        ),
    ),
    "exaone_moe": (
        "exaone_moe",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeConfig",
        dict(
            num_experts=4,
            num_experts_per_tok=2,
            num_shared_experts=1,
            is_moe_layer=[False, True, True, True],
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=1,
            topk_group=1,
        ),
    ),
    "laguna": ("laguna", "LagunaForCausalLM", "laguna.LagunaConfig", {}),
    "glm4_moe_lite": (
        "glm4_moe_lite",
        "Glm4MoeLiteForCausalLM",
        "Glm4MoeLiteConfig",
        dict(**_DEEPSEEK_MOE, **_DEEPSEEK_MLA),
    ),
}


def _config(name: str) -> Any:
    _, _, config_cls, fields = MODELS[name]
    import transformers

    if config_cls is None:
        cls = transformers.PretrainedConfig
    elif "." in config_cls:  # SGLang's own config class: "<module>.<Class>"
        module, _, attr = config_cls.rpartition(".")
        cls = getattr(importlib.import_module(f"sglang.srt.configs.{module}"), attr)
    else:
        cls = getattr(transformers, config_cls)
    if isinstance(fields.get("text_config"), str):
        # A multimodal model: the text config is that of the model it names.
        values = {**fields, "text_config": _config(fields["text_config"])}
    elif "text_config" in fields:
        # The text fields both nested and at the top, as checkpoints of the model
        # family write them.
        text = {**_COMMON, **fields["text_config"]}
        values = {**_COMMON, **fields, "text_config": text}
    else:
        values = {**_COMMON, **fields}
    if cls is transformers.PretrainedConfig and isinstance(values.get("vision_config"), dict):
        values["vision_config"] = cls(**values["vision_config"])
    config = cls(**values)
    for key, value in values.items():  # fields the config class drops or renames
        held = getattr(config, key, None)
        if held != value and not isinstance(held, transformers.PretrainedConfig):
            setattr(config, key, value)
    return config


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _init_parallel(rank: int, port: int) -> None:
    """SGLang's world and model-parallel groups for ``tp_size=1``, ``pp_size=2``."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state
    from sglang.srt.server_args import ServerArgs

    parallel_state.init_distributed_environment(
        world_size=PP_SIZE,
        rank=rank,
        local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
        timeout=60,
    )
    # Publish the topology initialize_model_parallel reads (and the server args the
    # model constructors read), keeping the WORLD group just built.
    runtime_context.reset_context()
    runtime_context.publish(
        ServerArgs(model_path="dummy", tp_size=1, pp_size=PP_SIZE, device="cpu"),
        role="test",
        ranks=runtime_context.SpawnRanks(world_rank=rank),
    )
    runtime_context.get_parallel().override_permanently(world_group=parallel_state._WORLD)
    parallel_state.initialize_model_parallel(backend="gloo")


def _all_ok(ok: bool) -> bool:
    flags: list[Any] = [None] * PP_SIZE
    torch.distributed.all_gather_object(flags, ok)
    return all(flags)


#: The capture hooks, in the order tried, and the stack attribute of their ids.
HOOKS = (
    ("set_eagle3_layers_to_capture", "layers_to_capture"),
    ("set_dflash_layers_to_capture", "layers_to_capture"),
    ("set_dspark_layers_to_capture", "dspark_layers_to_capture"),
)


def _hook(lm: Any) -> str:
    """Call the first capture hook ``lm`` has; the stack attribute of its ids."""
    for hook, ids_attr in HOOKS:
        if hasattr(lm, hook):
            getattr(lm, hook)(list(CAPTURE_IDS))
            return ids_attr
    raise RuntimeError(f"{type(lm).__name__} has no capture hook")


def _stack(lm: Any) -> Any:
    """The decoder stack the hook set the capture up on."""
    for module in lm.modules():
        if "pp_aux_relay" in vars(module):
            return module
    raise RuntimeError(f"no module of {type(lm).__name__} holds pp_aux_relay")


def _handoff(stack: Any, rank: int) -> dict[str, Any]:
    """Stage 0 hands its captures (``TOKENS`` rows as wide as the hidden states, layer
    id + 1 everywhere) to stage 1: the entry ``pp_aux_outgoing`` adds to its
    ``PPProxyTensors`` goes over a gloo send (as the PP handoff carries it), and stage 1
    collects all captures with ``pp_aux_collect``.  Stage 1 gets ``sent`` (the width of
    the entry stage 0 handed over, 0 without one) and ``collected`` (the first value of
    each capture, in the order returned)."""
    from sglang.srt.layers.aux_hidden_states import pp_aux_collect, pp_aux_outgoing

    relay = stack.pp_aux_relay
    if relay is None:
        raise RuntimeError("the hook set no relay up on this stage")
    captures = [
        torch.full((TOKENS, relay.hidden_size), float(i + 1)) for i in relay.local_layer_ids
    ]
    if rank == 0:
        shape = torch.tensor([-1, -1])
        try:
            entry = pp_aux_outgoing(stack, captures, None).get(AUX_ENTRY)
            shape = torch.tensor([0, 0] if entry is None else list(entry.shape))
        finally:
            torch.distributed.send(shape, dst=1)
        if entry is not None:
            torch.distributed.send(entry.contiguous(), dst=1)
        return {}
    shape = torch.zeros(2, dtype=torch.int64)
    torch.distributed.recv(shape, src=0)
    if int(shape[0]) < 0:
        raise RuntimeError("stage 0 failed to hand its captures over")
    incoming = {}
    if int(shape[1]) > 0:
        incoming[AUX_ENTRY] = torch.empty(tuple(shape.tolist()))
        torch.distributed.recv(incoming[AUX_ENTRY], src=0)
    collected = pp_aux_collect(stack, captures, incoming)
    return {
        "sent": int(shape[1]),
        "collected": [float(tensor[0, 0]) for tensor in collected],
    }


def _capture(lm: Any, rank: int) -> dict[str, Any]:
    """Call the capture hook; the stage's ids, reported width and what the handoff of
    its captures gave (see ``_handoff``)."""
    got: dict[str, Any] = {}
    stack = None
    try:
        ids_attr = _hook(lm)
        stack = _stack(lm)
        ids = getattr(stack, ids_attr, None)
        if ids is None:  # a DSPARK hook that keeps its ids with the others
            ids = stack.layers_to_capture
        got["stack"] = type(stack).__name__
        got["start_layer"] = int(stack.start_layer)
        got["earlier"] = sorted(
            int(i) for i in ids if 0 <= int(i) < min(NUM_LAYERS, stack.start_layer)
        )
        relay = stack.pp_aux_relay
        # The ids as the relay keeps them (some hooks store shifted ones): those this
        # stage takes, after as many as it receives.
        got["received"] = 0 if relay is None else len(relay.received_layer_ids)
        got["ids"] = [] if relay is None else [int(i) for i in relay.local_layer_ids]
        from sglang.srt.model_executor.model_runner_components import misc_utils

        got["width"] = int(
            misc_utils.resolve_pp_proxy_aux_hidden_size(model=lm, pp_size=PP_SIZE, pp_rank=rank)
        )
    except BaseException:
        got["error"] = "hook: " + traceback.format_exc()[-3000:]
    if _all_ok("error" not in got):
        try:
            got.update(_handoff(stack, rank))
        except BaseException:
            got["error"] = "handoff: " + traceback.format_exc()[-3000:]
    else:
        got.setdefault("error", "hook failed on the other rank")
    return got


def _check(name: str, rank: int) -> dict[str, Any]:
    module, cls_name, _, _ = MODELS[name]
    record: dict[str, Any] = {"model": name, "cls": cls_name, "rank": rank}
    lm = None
    try:
        cls = getattr(importlib.import_module(f"sglang.srt.models.{module}"), cls_name)
        with torch.device("cpu"):
            lm = cls(config=_config(name))
    except BaseException:
        record["error"] = "build: " + traceback.format_exc()[-3000:]
    if not _all_ok(lm is not None):
        record.setdefault("error", "build failed on the other rank")
        return record
    record.update(_capture(lm, rank))
    return record


def _rank(rank: int, port: int, names: list[str], results: Any) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    records: list[dict[str, Any]] = []
    try:
        torch.set_num_threads(1)
        _init_parallel(rank, port)
        for name in names:
            records.append(_check(name, rank))
        results.put((rank, records, None))
    except BaseException:
        results.put((rank, records, traceback.format_exc()[-4000:]))


def main(argv: list[str]) -> int:
    timeout = 240.0
    if argv[:1] == ["--timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    names = argv or list(MODELS)
    for name in names:  # import once in the parent; the forked ranks share it
        try:
            importlib.import_module(f"sglang.srt.models.{MODELS[name][0]}")
        except BaseException:
            pass
    importlib.import_module("sglang.srt.distributed.parallel_state")
    importlib.import_module("sglang.srt.server_args")
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank, args=(rank, port, names, results)) for rank in range(PP_SIZE)
    ]
    for proc in procs:
        proc.start()
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        for _ in procs:
            try:
                rank, got, error = results.get(timeout=timeout)
            except queue.Empty:
                errors.append(f"no answer within {timeout:.0f} s")
                break
            records += got
            if error:
                errors.append(f"rank {rank}: {error}")
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    print(json.dumps({"records": records, "errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
