"""Aux hidden-state capture under pipeline parallelism with the real model classes.

Every causal LM whose capture hooks the patch changes (``PATCHED``) is built through
its real ``__init__`` with a tiny config (4 layers, hidden size 64) as stage 0 and
stage 1 of 2 gloo processes, all models in one spawn of the two ranks.  Its capture
hook takes one capture on each stage, and then:

* handoff: stage 0's ``pp_aux_outgoing`` entry (``aux_hidden_states``) goes to stage 1
  in the ``PPProxyTensors``, and stage 1's ``pp_aux_collect`` returns every capture in
  layer order, those of stage 0 equal to what stage 0 captured;
* sizing: ``resolve_pp_proxy_aux_hidden_size`` and ``allocate_pp_proxy_tensors`` (the
  functions the model runner and the CUDA graph runners size the handoff with) give
  stage 1 an ``aux_hidden_states`` buffer exactly as wide as the entry stage 0 sends,
  and stage 0 none; the entry is received into that buffer;
* validation (releases with that check): ``check_pipeline_parallel_compat`` accepts
  EAGLE3 with PP for a patched architecture and still refuses it for an architecture
  whose model file has no capture hook.

GPU-only packages SGLang imports (sgl_kernel, flashinfer, ...) are stood in for where
they do not import (``stub_gpu_only_packages``, ``sglang.test``), so the test runs on a
CPU machine.
"""

import importlib
import json
import multiprocessing as mp
import os
import queue
import socket
import sys
import traceback
import unittest
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from sglang.test.pp_aux_capture_family_models import stub_gpu_only_packages

stub_gpu_only_packages()
# CPU: DeepSeek-V4 keeps its wo_a projection unquantized instead of asking for the FP8
# GEMM's weight scales (read when sglang.srt.models.deepseek_v4 is imported).
os.environ.setdefault("SGLANG_OPT_FP8_WO_A_GEMM", "0")

from sglang.test.ci.ci_register import register_cpu_ci  # noqa: E402
from sglang.test.test_utils import CustomTestCase  # noqa: E402

register_cpu_ci(est_time=120, suite="base-a-test-cpu")

#: The model files whose capture hooks the patch changes.
PATCHED = [
    # @@PATCHED_MODELS@@
]

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
        dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=16,
            swiglu_limit=7.0,
        ),
    ),
    "minimax_m3": (
        "minimax_m3",
        "MiniMaxM3SparseForCausalLM",
        None,
        dict(
            num_local_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
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
        dict(
            hidden_act="gelu_pytorch_tanh",
            hidden_size_per_layer_input=0,
            # Full-attention layers shaped as the sliding ones: one attention
            # shape for every layer.
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
    if cls is transformers.PretrainedConfig and isinstance(
        values.get("vision_config"), dict
    ):
        values["vision_config"] = cls(**values["vision_config"])
    config = cls(**values)
    for key, value in values.items():  # fields the config class drops or renames
        held = getattr(config, key, None)
        if held != value and not isinstance(held, transformers.PretrainedConfig):
            setattr(config, key, value)
    return config


#: The models of ``MODELS`` this release's patch covers.
UNDER_TEST = {name: spec for name, spec in MODELS.items() if spec[0] in PATCHED}
TIMEOUT_S = float(os.environ.get("SGLANG_TEST_PP_AUX_TIMEOUT", "600"))


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _init_parallel(rank, port):
    """SGLang's world and model-parallel groups for ``tp_size=1``, ``pp_size=2``, and
    the server args the model constructors read."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed import parallel_state
    from sglang.srt.server_args import ServerArgs

    parallel_state.init_distributed_environment(
        world_size=PP_SIZE,
        rank=rank,
        local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
        timeout=int(TIMEOUT_S),
    )
    server_args = ServerArgs(
        model_path="dummy", tp_size=1, pp_size=PP_SIZE, device="cpu"
    )
    runtime_context.reset_context()
    # @@if published_topology
    # Publish the topology initialize_model_parallel reads, keeping the WORLD group
    # just built.
    runtime_context.publish(
        server_args,
        role="test",
        ranks=runtime_context.SpawnRanks(world_rank=rank),
    )
    runtime_context.get_parallel().override_permanently(
        world_group=parallel_state._WORLD
    )
    parallel_state.initialize_model_parallel(backend="gloo")
    # @@else published_topology
    runtime_context.publish(server_args, role="test")
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=PP_SIZE,
        backend="gloo",
    )
    # @@end published_topology


def _all_ok(ok):
    """Whether every rank is fine; a failure on one rank skips what follows on both,
    so no rank ever waits for a send that will not come."""
    flags = [None] * PP_SIZE
    dist.all_gather_object(flags, ok)
    return all(flags)


#: The capture hooks, in the order tried.
HOOKS = (
    "set_eagle3_layers_to_capture",
    "set_dflash_layers_to_capture",
    "set_dspark_layers_to_capture",
)


def _call_hook(lm):
    for hook in HOOKS:
        if hasattr(lm, hook):
            getattr(lm, hook)(list(CAPTURE_IDS))
            return hook
    raise RuntimeError(f"{type(lm).__name__} has no capture hook")


def _stack(lm):
    """The decoder stack the hook set the capture up on."""
    for module in lm.modules():
        if "pp_aux_relay" in vars(module):
            return module
    raise RuntimeError(f"no module of {type(lm).__name__} holds pp_aux_relay")


def _sizing(lm, rank):
    """(width the runner resolves, width of the aux buffer it allocates, buffers)."""
    from sglang.srt.model_executor.model_runner_components import misc_utils
    from sglang.srt.model_executor.runner_utils import buffers

    width = misc_utils.resolve_pp_proxy_aux_hidden_size(
        model=lm, pp_size=PP_SIZE, pp_rank=rank
    )
    # @@if public_allocate
    allocate = buffers.allocate_pp_proxy_tensors
    # @@else public_allocate
    allocate = buffers._allocate_pp_proxy_tensors
    # @@end public_allocate
    allocated = allocate(
        max_num_tokens=TOKENS,
        max_hidden_tokens=TOKENS,
        hidden_size=HIDDEN,
        dtype=torch.float32,
        pp_proxy_aux_hidden_size=width,
    )
    entry = allocated.get(AUX_ENTRY)
    return int(width), 0 if entry is None else int(entry.shape[-1]), allocated


def _capture(relay, value_of):
    """This stage's captures (a list, in layer order): layer id + 1 everywhere."""
    return [
        torch.full((TOKENS, relay.hidden_size), value_of(i))
        for i in relay.local_layer_ids
    ]


def _handoff(lm, stack, rank, allocated):
    """Stage 0 hands its captures to stage 1 in the PP proxy tensors, stage 1
    receives them into its allocated buffer and collects every capture."""
    from sglang.srt.layers.aux_hidden_states import pp_aux_collect, pp_aux_outgoing
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    relay = stack.pp_aux_relay
    if relay is None:
        raise RuntimeError("the capture hook set no relay up on this stage")
    captures = _capture(relay, lambda i: float(i + 1))
    if rank == 0:
        proxy = PPProxyTensors(
            {"hidden_states": torch.zeros(TOKENS, HIDDEN)}
            | pp_aux_outgoing(stack, captures, None)
        )
        entry = proxy.tensors.get(AUX_ENTRY)
        shape = [0, 0] if entry is None else list(entry.shape)
        dist.send_object_list([(shape, list(relay.local_layer_ids))], dst=1)
        if entry is not None:
            dist.send(entry.contiguous(), dst=1)
        return {"sent_ids": list(relay.local_layer_ids)}
    holder = [None]
    dist.recv_object_list(holder, src=0)
    shape, earlier_ids = holder[0]
    received = {}
    if shape[-1]:
        incoming = torch.empty(shape)
        dist.recv(incoming, src=0)
        # Into the buffer the runner allocated (exactly as wide, or copy_ fails).
        buffer = allocated[AUX_ENTRY][:TOKENS]
        buffer.copy_(incoming)
        received[AUX_ENTRY] = buffer
    collected = pp_aux_collect(stack, captures, PPProxyTensors(received))
    expected = [
        torch.full((TOKENS, relay.hidden_size), float(i + 1))
        for i in list(earlier_ids) + list(relay.local_layer_ids)
    ]
    return {
        "sent": int(shape[-1]),
        "earlier_ids": list(earlier_ids),
        "ids": list(relay.local_layer_ids),
        "in_order": list(earlier_ids) + list(relay.local_layer_ids)
        == sorted(list(earlier_ids) + list(relay.local_layer_ids)),
        "collected_equal": len(collected) == len(expected)
        and all(torch.equal(a, b) for a, b in zip(collected, expected)),
        "collected": [float(t[0, 0]) for t in collected],
    }


def _check(name, rank):
    module, cls_name, _, _ = MODELS[name]
    record = {"model": name, "cls": cls_name, "rank": rank}
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
    from sglang.srt.layers.aux_hidden_states import pp_aux_proxy_hidden_size

    stack = allocated = None
    try:
        record["hook"] = _call_hook(lm)
        stack = _stack(lm)
        record["reported"] = int(pp_aux_proxy_hidden_size(lm))
        record["resolved"], record["buffer"], allocated = _sizing(lm, rank)
    except BaseException:
        record["error"] = "hook/sizing: " + traceback.format_exc()[-3000:]
    if not _all_ok("error" not in record):
        record.setdefault("error", "hook or sizing failed on the other rank")
        return record
    try:
        record.update(_handoff(lm, stack, rank, allocated))
    except BaseException:
        record["error"] = "handoff: " + traceback.format_exc()[-3000:]
    return record


def _rank(rank, port, names, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    records = []
    try:
        torch.set_num_threads(1)
        _init_parallel(rank, port)
        for name in names:
            records.append(_check(name, rank))
        results.put((rank, records, None))
    except BaseException:
        results.put((rank, records, traceback.format_exc()[-4000:]))


def run_ranks(names, timeout=TIMEOUT_S):
    """Records of both ranks for the models ``names``; errors of ranks that failed
    or did not answer within ``timeout`` seconds."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    workers = [
        context.Process(target=_rank, args=(rank, port, names, results))
        for rank in range(PP_SIZE)
    ]
    for worker in workers:
        worker.start()
    records, errors = [], []
    try:
        for _ in workers:
            try:
                rank, got, error = results.get(timeout=timeout)
            except queue.Empty:
                errors.append(f"no answer within {timeout:.0f} s")
                break
            records += got
            if error:
                errors.append(f"rank {rank}: {error}")
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=5)
    return records, errors


# ---------------------------------------------------------------- validation


def _server_args(arch, **fields):
    """A server-args record with the model config given as a fixture's (no
    checkpoint is read)."""
    base = dict(
        pp_size=2,
        disable_overlap_schedule=True,
        speculative_algorithm="EAGLE3",
        enable_multi_layer_eagle=False,
        disaggregation_mode="prefill",
        speculative_adaptive=False,
        enable_dp_attention=False,
        attn_dp_size=1,
        ep_join_mode="none",
        min_free_slots_delay=None,
        enable_return_aux_hidden_states=False,
        return_aux_hidden_state_layer_ids=None,
        speculative_draft_model_path=None,
        model_path="/models/target",
    )
    base.update(fields)
    record = SimpleNamespace(**base)
    hf_config = SimpleNamespace(architectures=[arch])
    # The fields get_model_architecture reads, as the server resolves the model class.
    record._model_config = SimpleNamespace(
        hf_config=hf_config,
        hf_text_config=hf_config,
        is_generation=True,
        is_multimodal=False,
        quantization=None,
        model_impl="auto",
        model_path=record.model_path,
        revision=None,
    )
    return record


#: An architecture whose model file has no capture hook (the patch leaves it as is).
UNPATCHED_ARCH = "Gemma2ForCausalLM"


class TestPPAuxCapture(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.records, cls.errors = run_ranks(sorted(UNDER_TEST))
        cls.by_stage = {(r["model"], r["rank"]): r for r in cls.records}

    def test_every_patched_model_is_built(self):
        self.assertTrue(UNDER_TEST)
        self.assertEqual(self.errors, [])
        self.assertEqual(
            set(self.by_stage), {(name, r) for name in UNDER_TEST for r in range(2)}
        )
        for key, record in sorted(self.by_stage.items()):
            with self.subTest(model=key[0], rank=key[1]):
                self.assertNotIn("error", record, record.get("error"))

    def test_handoff_reaches_the_last_stage_in_layer_order(self):
        for name in sorted(UNDER_TEST):
            first, last = self.by_stage.get((name, 0)), self.by_stage.get((name, 1))
            with self.subTest(model=name):
                self.assertTrue(first and last and "error" not in last, (first, last))
                self.assertEqual(first["sent_ids"], last["earlier_ids"])
                self.assertTrue(last["earlier_ids"] and last["ids"], last)
                self.assertTrue(last["in_order"], last)
                self.assertTrue(last["collected_equal"], last)

    def test_stage_one_buffer_is_as_wide_as_what_stage_zero_sends(self):
        for name in sorted(UNDER_TEST):
            first, last = self.by_stage.get((name, 0)), self.by_stage.get((name, 1))
            with self.subTest(model=name):
                self.assertTrue(first and last and "error" not in last, (first, last))
                self.assertEqual(
                    (first["reported"], first["resolved"], first["buffer"]), (0, 0, 0)
                )
                self.assertEqual(last["sent"], HIDDEN * len(last["earlier_ids"]))
                self.assertEqual(
                    (last["reported"], last["resolved"], last["buffer"]),
                    (last["sent"],) * 3,
                )
    # @@if pp_compat_check

    def test_validation_accepts_patched_architectures_only(self):
        from sglang.srt.arg_groups.overrides import resolving_view
        from sglang.srt.arg_groups.validation_hook import (
            check_pipeline_parallel_compat as check,
        )

        # The architectures whose patched hooks include EAGLE3's (others relay only
        # DFLASH or DSPARK captures).
        patched = sorted(
            {
                MODELS[name][1]
                for name in UNDER_TEST
                if self.by_stage.get((name, 1), {}).get("hook")
                == "set_eagle3_layers_to_capture"
            }
        )
        self.assertTrue(patched)
        for arch in patched:
            with self.subTest(arch=arch):
                check(resolving_view(_server_args(arch)))
        with self.assertRaises((AssertionError, ValueError)):
            check(resolving_view(_server_args(UNPATCHED_ARCH)))
    # @@end pp_compat_check


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--json":
        # python test_pp_aux_capture.py --json [MODEL ...]: the raw records.
        chosen = sys.argv[2:] or sorted(UNDER_TEST)
        records, errors = run_ranks(chosen)
        print(json.dumps({"records": records, "errors": errors}))
    else:
        unittest.main()
