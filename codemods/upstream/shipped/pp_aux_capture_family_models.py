"""Test utilities of the aux hidden-state capture tests under pipeline parallelism.

* Tiny configs of the patched causal LMs (``TINY_MODELS``, ``tiny_config``), with
  which ``test_pp_aux_capture.py`` builds them through their real ``__init__``.
* SGLang's parallel state for a gloo world of PP stages (``init_parallel``), as a
  server sets it up before it builds a model.
* Stand-in models for ``test_pp_aux_capture_family.py``: one PP stage of a real SGLang
  causal-LM class, built through its ``__init__`` with its tiny config, then given
  stand-in decoder layers, embedding, norm, logits processor and PP group (no
  attention kernels) and weights filled by parameter name, its forward run as the
  scheduler runs it, and the aux states of a single-stage run to compare against.
* For every test of the capture, the stand-ins for GPU-only packages on a CPU machine
  (``stub_gpu_only_packages``).
* For the tests of the server-argument checks, the record of a pipeline-parallel
  launch they read (``pp_server_args``).
"""

import contextlib
import importlib
import multiprocessing
import socket
import sys
import zlib
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
from torch import nn

NUM_LAYERS = 9
HIDDEN_SIZE = 16
#: Capture ids passed to every hook.  Stored as [2, 4, 5, 7] by hooks that capture
#: before layer id + 1, kept as they are by those that capture after the layer: either
#: way, on 3 stages ([0, 3), [3, 6), [6, 9)) every stage owns one; on 2 stages
#: ([0, 4), [4, 9)) the last stage owns most.  EAGLE3 hooks also run with None (the
#: model's default layers).
LAYER_IDS = [1, 3, 4, 6]
#: Token counts of the batches each case runs (0: an empty microbatch, which some
#: models capture nothing for; every stage must agree on that).
BATCHES = (3, 0, 1)
#: How long ``run_family`` waits for each of its stage processes.
WORKER_TIMEOUT_S = 900.0
#: How long one collective or point-to-point operation may wait.
OP_TIMEOUT_S = 300.0


# ------------------------------------------------ GPU-only packages on a CPU machine

# @@if stub_sgl_kernel
#: Modules SGLang imports at module level on the paths under test that may not import
#: on a CPU machine: tvm_ffi and flashinfer (packages SGLang declares) and vllm's
#: custom ops (an AWQ kernel).  Where one does not import, ``stub_gpu_only_packages``
#: puts an empty stand-in module under exactly that name in ``sys.modules`` for the
#: test module's run (sgl_kernel: SGLang's own ``maybe_stub_sgl_kernel``).  No kernel
#: of theirs ever runs in these tests.
STAND_IN_MODULES = ("tvm_ffi", "flashinfer", "vllm", "vllm._custom_ops")
# @@else stub_sgl_kernel
#: GPU-only packages that SGLang imports at module level (vllm: when a rotary
#: embedding is built off CUDA, for a kernel it never runs here).  Where one does not
#: import, ``stub_gpu_only_packages`` stands in for it with a ``sys.meta_path`` finder
#: that makes empty stub modules (this release has no ``maybe_stub_sgl_kernel``).
GPU_ONLY_PACKAGES = ("sgl_kernel", "flashinfer", "tvm_ffi", "vllm")
# @@end stub_sgl_kernel


class _Placeholder:
    """Callable, indexable stand-in; as a decorator it returns the function as is."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Placeholder(f"{self._name}()")

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __getitem__(self, item):
        return _Placeholder(f"{self._name}[]")

    def __mro_entries__(self, bases):
        return (object,)


def _accept_any(self, *args, **kwargs):
    self.args, self.kwargs = args, kwargs


def _stand_in_getattr(module):
    """CamelCase names become empty classes (``isinstance`` works against them),
    others placeholders; both are kept on the module."""

    def __getattr__(item):
        if item.startswith("__"):
            raise AttributeError(item)
        if item[:1].isupper():
            value = type(
                item, (), {"__module__": module.__name__, "__init__": _accept_any}
            )
        else:
            value = _Placeholder(f"{module.__name__}.{item}")
        setattr(module, item, value)
        return value

    return __getattr__


# @@if stub_sgl_kernel
def _stand_in_module(name):
    """An empty module (a package) named ``name`` whose every name is a stand-in."""
    import importlib.machinery
    import types

    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    module.__version__ = "0.0.0"
    module.__getattr__ = _stand_in_getattr(module)
    return module


def stub_gpu_only_packages():
    """Stand in for each module of ``STAND_IN_MODULES`` that does not import here
    (``sys.modules`` holds the stand-in under that name until the test module's
    tests have run: ``unittest.addModuleCleanup``), then for ``sgl_kernel`` through
    ``sglang.test.test_utils.maybe_stub_sgl_kernel``.  Must run before the SGLang
    modules under test are imported; a no-op where the modules import."""
    import unittest

    added = {}
    for name in STAND_IN_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # ImportError, or OSError from a kernel library
            added[name] = sys.modules[name] = _stand_in_module(name)

    def remove():
        for name, module in added.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]

    unittest.addModuleCleanup(remove)

    from sglang.test.test_utils import maybe_stub_sgl_kernel

    maybe_stub_sgl_kernel()


# @@else stub_sgl_kernel
def stub_gpu_only_packages():
    """Stand in for the packages of ``GPU_ONLY_PACKAGES`` that do not import here,
    through a finder.  Must run before the SGLang modules under test are imported; a
    no-op where the packages import."""
    import importlib.abc
    import importlib.machinery

    missing = []
    for name in GPU_ONLY_PACKAGES:
        try:
            importlib.import_module(name)
        except Exception:  # ImportError, or OSError from a kernel library
            missing.append(name)

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.__path__ = []
            module.__version__ = "0.0.0"
            module.__getattr__ = _stand_in_getattr(module)

    class _GpuOnlyFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in missing:
                return importlib.machinery.ModuleSpec(
                    fullname, _Loader(), is_package=True
                )
            return None

    if missing:
        sys.meta_path.insert(0, _GpuOnlyFinder())


# @@end stub_sgl_kernel
# ------------------------------------- tiny configs of the patched causal LMs

#: Width and depth of the tiny configs: 4 layers, hidden size 64.
TINY_HIDDEN = 64
TINY_LAYERS = 4
#: The tiny text stack every config starts from (4 layers, hidden size 64).
_COMMON = dict(vocab_size=128, hidden_size=TINY_HIDDEN, num_hidden_layers=TINY_LAYERS)
_COMMON.update(intermediate_size=96, hidden_act="silu", tie_word_embeddings=False)
_COMMON.update(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
_COMMON.update(max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6)
# Blocks of fields that several of the tiny configs below share.
_DEFAULT_ROPE = dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0))
#: The only rope scaling SGLang's MLA attention builds on CPU.
_DEEPSEEK_YARN = dict(rope_type="deepseek_yarn", original_max_position_embeddings=256)
_DEEPSEEK_YARN.update(factor=1.0, beta_fast=32, beta_slow=1)
_DEEPSEEK_YARN.update(mscale=1.0, mscale_all_dim=1.0)
#: Routed experts, under the three names the config families give their count.
_EXPERTS = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
_LOCAL_EXPERTS = dict(num_local_experts=4, num_experts_per_tok=2)
_ROUTED_EXPERTS = dict(n_routed_experts=4, num_experts_per_tok=2, n_group=1)
_ROUTED_EXPERTS.update(moe_intermediate_size=32, topk_group=1)
_GROUPED_TOPK = dict(topk_method="noaux_tc", scoring_func="sigmoid")
#: DeepSeek-style routed experts with a shared one after a dense first layer.
_DEEPSEEK_MOE = dict(_ROUTED_EXPERTS, n_shared_experts=1, first_k_dense_replace=1)
#: Latent attention (MLA): the ranks, and the heads of the MLA models but DeepSeek-V4.
_LATENT_RANKS = dict(q_lora_rank=32, kv_lora_rank=32)
_LATENT_RANKS.update(qk_nope_head_dim=16, qk_rope_head_dim=16)
_LATENT = dict(_LATENT_RANKS, v_head_dim=16, num_key_value_heads=4)
#: DeepSeek-style latent attention with the rope scaling it builds on CPU.
_DEEPSEEK_MLA = dict(_LATENT, rope_scaling=_DEEPSEEK_YARN, moe_layer_freq=1)
_DEEPSEEK_MLA.update(_GROUPED_TOPK)
#: What both Bailing configs read besides their experts.
_BAILING = dict(_DEFAULT_ROPE, num_shared_experts=1, first_k_dense_replace=1)
_BAILING.update(use_bias=False, use_qkv_bias=False, num_nextn_predict_layers=0)
_BAILING.update(partial_rotary_factor=1.0, rotary_dim=16)
#: MiMo-V2's sliding-window attention layers.
_MIMO_SLIDING_WINDOW = dict(sliding_window_size=16, swa_head_dim=16)
_MIMO_SLIDING_WINDOW.update(swa_num_attention_heads=4, swa_num_key_value_heads=2)
#: Vision towers narrower than the text stack (a width taken from one would show).
_SMALL_VISION = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2)
_QWEN_VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2)
_QWEN_VISION.update(out_hidden_size=TINY_HIDDEN, in_channels=3, patch_size=14)
_QWEN_VISION.update(spatial_merge_size=2, temporal_patch_size=2)
#: Qwen3-VL without its vision tower (the text stack alone).
_QWEN3_VL = dict(
    vision_config=dict(deepstack_visual_indexes=[]),
    language_model_only=True,
    attention_bias=False,
)
_CLIP = dict(_SMALL_VISION, model_type="clip_vision_model", num_hidden_layers=1)
_CLIP.update(image_size=28, patch_size=14, num_channels=3, hidden_act="gelu")
_CLIP.update(layer_norm_eps=1e-5, img_token_compression_config={})
_CLIP.update(position_embedding_type="rope", rope_mode="3d", rope_theta=10000.0)
_CLIP.update(vision_segment_max_frames=None)

#: model key -> (module, causal-LM class, config class, fields); the config class is
#: transformers' (a name), SGLang's (``"<sglang.srt.configs module>.<Class>"``) or
#: ``PretrainedConfig`` (None).  The fields are what the constructor reads, on top of
#: ``_COMMON``; a ``text_config`` naming another key nests that model's config.  Hybrid
#: stacks are built with attention layers only (qwen3_5_text: full attention every
#: layer; nemotron_h: attention and MLP layers, no Mamba; bailing_moe_v3: no linear
#: attention layer); deepseek_v4's layers all compress (ratio 4: the rope SGLang builds
#: on CPU); qwen3_vl and qwen3_vl_moe are built ``language_model_only`` (no vision
#: tower); the other multimodal models build a small one.
TINY_MODELS: dict[str, tuple[str, str, str | None, dict[str, Any]]] = {
    "llama": ("llama", "LlamaForCausalLM", "LlamaConfig", {}),
    "gpt_oss": (
        "gpt_oss",
        "GptOssForCausalLM",
        "GptOssConfig",
        dict(_LOCAL_EXPERTS, sliding_window=16, swiglu_limit=7.0),
    ),
    "minimax_m3": (
        "minimax_m3",
        "MiniMaxM3SparseForCausalLM",
        None,
        dict(
            _LOCAL_EXPERTS,
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
        dict(_DEFAULT_ROPE, full_attention_interval=1),
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
            _EXPERTS,
            **_BAILING,
            moe_shared_expert_intermediate_size=32,
            embedding_dropout=0.0,
            norm_head=False,
            norm_topk_prob=True,
        ),
    ),
    "mimo_v2": (
        "mimo_v2",
        "MiMoV2ForCausalLM",
        None,
        dict(
            _ROUTED_EXPERTS,
            **_GROUPED_TOPK,
            **_MIMO_SLIDING_WINDOW,
            moe_layer_freq=[0, 1, 1, 1],
            encoder_only=False,
            attention_bias=False,
            layernorm_epsilon=1e-6,
            hybrid_layer_pattern=[0] * TINY_LAYERS,
            norm_topk_prob=True,
            scale_emb=1.0,
            output_format=None,
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
                _QWEN_VISION,
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
        dict(_QWEN3_VL, text_config={}),
    ),
    "qwen3_vl_moe": (
        "qwen3_vl_moe",
        "Qwen3VLMoeForConditionalGeneration",
        "qwen3_vl.Qwen3VLMoeConfig",
        dict(_QWEN3_VL, text_config=dict(_EXPERTS)),
    ),
    "deepseek_v4": (
        "deepseek_v4",
        "DeepseekV4ForCausalLM",
        "deepseek_v4.DeepSeekV4Config",
        dict(
            _ROUTED_EXPERTS,
            **_LATENT_RANKS,
            architectures=["DeepseekV4ForCausalLM"],
            quantization_config={},
            v_head_dim=32,
            num_key_value_heads=1,
            o_lora_rank=32,
            o_groups=2,
            index_head_dim=16,
            index_n_heads=2,
            compress_ratios=[4] * TINY_LAYERS,
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
        dict(text_config={}, vision_config=dict(_QWEN_VISION, swiglu_limit=7.0)),
    ),
    "bailing_moe_v3": (
        "bailing_moe_v3",
        "BailingMoeV3ForCausalLM",
        None,
        dict(
            _EXPERTS,
            **_BAILING,
            **_LATENT,
            layer_group_size=[0] * TINY_LAYERS,
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
                _SMALL_VISION,
                num_hidden_layers=1,
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
        dict(_EXPERTS, shared_expert_intermediate_size=32),
    ),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3MoeConfig", _EXPERTS),
    "glm4_moe": ("glm4_moe", "Glm4MoeForCausalLM", "Glm4MoeConfig", _DEEPSEEK_MOE),
    "deepseek_v2": (
        "deepseek_v2",
        "DeepseekV2ForCausalLM",
        "DeepseekV3Config",
        dict(_DEEPSEEK_MOE, **_DEEPSEEK_MLA),
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
        dict(_LOCAL_EXPERTS, rotary_dim=16, scoring_func="sigmoid"),
    ),
    "exaone_moe": (
        "exaone_moe",
        "ExaoneMoEForCausalLM",
        "ExaoneMoeConfig",
        dict(
            _EXPERTS,
            num_shared_experts=1,
            is_moe_layer=[False, True, True, True],
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
        dict(_DEEPSEEK_MOE, **_DEEPSEEK_MLA),
    ),
}


def _deepened(values: dict, num_layers: int) -> dict:
    """``values`` for ``num_layers`` layers: per-layer fields (lists or patterns as
    long as the tiny stack) repeated, nested text configs too."""
    out = dict(values, num_hidden_layers=num_layers)
    for key, value in values.items():
        per_layer = isinstance(value, list) or key.endswith("_pattern")
        if per_layer and len(value) == TINY_LAYERS:
            out[key] = (value * num_layers)[:num_layers]
        elif key == "text_config" and isinstance(value, dict):
            out[key] = _deepened(value, num_layers)
    return out


def tiny_config(name: str, num_layers: int = TINY_LAYERS) -> Any:
    """The config of ``TINY_MODELS[name]``, as a checkpoint of the model would hold
    it; ``num_layers`` deep (per-layer fields repeated)."""
    _, _, config_cls, fields = TINY_MODELS[name]
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
        text_config = tiny_config(fields["text_config"], num_layers)
        values = {**fields, "text_config": text_config}
    elif "text_config" in fields:
        # The text fields both nested and at the top, as checkpoints of the model
        # family write them.
        text = {**_COMMON, **fields["text_config"]}
        values = {**_COMMON, **fields, "text_config": text}
    else:
        values = {**_COMMON, **fields}
    if num_layers != TINY_LAYERS:
        values = _deepened(values, num_layers)
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


# ------------------------------------------------------------ server arguments


def pp_server_args(arch, model_impl="auto", **fields):
    """The server arguments the server-argument checks read, for ``arch`` on 2 PP
    stages with EAGLE3 on a prefill node (``fields`` replace any of them).  The model
    config is given as a fixture's: the fields ``get_model_architecture`` reads
    (``--model-impl`` among them) resolve the model class, no checkpoint is read."""
    record = SimpleNamespace(
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
    vars(record).update(fields)
    config = SimpleNamespace(architectures=[arch])
    record._model_config = SimpleNamespace(
        hf_config=config,
        hf_text_config=config,
        model_path=record.model_path,
        model_impl=model_impl,
        revision=None,
        quantization=None,
        is_generation=True,
        is_multimodal=False,
    )
    return record


# ------------------------------------------------------------- parallel state


def stage_processes(*modules: str):
    """The multiprocessing context the PP stage processes start from: a fork server
    that imports SGLang and ``modules`` (the test module, the model files) once, so
    that every stage process starts with them loaded instead of importing them again."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *modules])
    return context


def free_port():
    """A TCP port on 127.0.0.1 free now, for the stages' process group."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def _groups_without_pynccl(parallel_state):
    """The model-parallel groups built meanwhile talk over gloo only: every stage runs
    on CPU, and a CUDA build of torch on a host without a GPU would otherwise set up
    PyNccl for the PP group (``use_pynccl`` defaults on off NPU/XPU) and fail."""
    coordinator = parallel_state.GroupCoordinator

    def without_pynccl(*args, **kwargs):
        kwargs["use_pynccl"] = False
        return coordinator(*args, **kwargs)

    with mock.patch.object(parallel_state, "GroupCoordinator", without_pynccl):
        yield


def init_parallel(rank, world_size, port, timeout=OP_TIMEOUT_S):
    """SGLang's world and model-parallel groups for ``tp_size=1`` and
    ``pp_size=world_size`` over gloo, and the server args the model constructors
    read, as a server sets them up before it builds a model."""
    from sglang.srt.distributed import parallel_state

    parallel_state.init_distributed_environment(
        world_size=world_size,
        rank=rank,
        local_rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
        timeout=int(timeout),
    )
    # @@if published_server_args
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(
        model_path="dummy", tp_size=1, pp_size=world_size, device="cpu"
    )
    runtime_context.reset_context()
    # @@end published_server_args
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
    with _groups_without_pynccl(parallel_state):
        parallel_state.initialize_model_parallel(backend="gloo")
    # @@else published_topology
    # @@if published_server_args
    runtime_context.publish(server_args, role="test")
    # @@end published_server_args
    with _groups_without_pynccl(parallel_state):
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=1,
            pipeline_model_parallel_size=world_size,
            backend="gloo",
        )
    # @@end published_topology
    # @@if native_cpu_activation
    # @@if published_server_args
    # @@else published_server_args
    # The attention-DP state the model runner sets up from the server args.
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import ServerArgs

    initialize_dp_attention(
        ServerArgs(model_path="dummy", tp_size=1, pp_size=world_size, device="cpu"),
        SimpleNamespace(hidden_size=TINY_HIDDEN, dtype=torch.float32, hf_config=None),
    )
    # @@end published_server_args
    # @@end native_cpu_activation


# ------------------------------------------------------------------ stand-ins


class StandInBoundary:
    """``layer.attn_boundary`` of stacks that restore the residual stream from the PP
    handoff (``layers[start].attn_boundary.from_pp``): the stand-in layers keep no
    separate residual, so the stream starts afresh from the hidden states sent."""

    def from_pp(self, tensors, forward_batch, **kwargs):
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        residual_batch.start(forward_batch)
        return tensors["hidden_states"]

    def capture_output(self, hidden_states, forward_batch):
        """``layer.boundary.capture_output`` of stacks that snapshot the stream at
        layer entry: the handle goes on, the snapshot is captured."""
        from sglang.srt.layers.layer_boundary.residual import batch as residual_batch

        return hidden_states, residual_batch.snapshot(hidden_states, forward_batch)


class StandInLayer(nn.Module):
    """A decoder layer with SGLang's calling convention and deterministic math."""

    def __init__(
        self, hidden_size: int, returns: int, entry: bool = False, pair: bool = False
    ) -> None:
        super().__init__()
        # Filled by ``fill_weights``, from the parameter's name.
        weight = torch.empty(hidden_size, hidden_size)
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.returns = returns
        self.hidden_size = hidden_size
        self.attn_boundary = StandInBoundary()
        self.boundary = self.attn_boundary
        self.entry = entry
        self.pair = pair

    def forward(
        self,
        positions=None,
        hidden_states=None,
        forward_batch=None,
        residual=None,
        *args,
        captured_last_layer_outputs=None,
        **kwargs,
    ):
        if self.entry or "capture_output" in kwargs:
            # Layers of stacks that keep the residual stream in forward_batch: the input
            # is captured as a whole at entry, through the callback or into the list.
            if kwargs.get("capture_output") is not None:
                kwargs["capture_output"](hidden_states)
            if captured_last_layer_outputs is not None:
                captured_last_layer_outputs.capture(hidden_states)
            if kwargs.get("capture_gathered") is not None:
                kwargs["capture_gathered"].capture(hidden_states)
            hidden_states = torch.tanh(hidden_states @ self.weight)
            return (hidden_states, None) if self.pair else hidden_states
        residual = hidden_states if residual is None else hidden_states + residual
        if captured_last_layer_outputs is not None:
            captured_last_layer_outputs.append(residual)
        hidden_states = torch.tanh(residual @ self.weight)
        if self.returns == 4:  # mHC layers: (hidden_states, residual, post, comb)
            return hidden_states, None, None, None
        if self.returns == 3:
            return hidden_states, residual, None
        return hidden_states, residual

    def hc_post(self, hidden_states, residual, post, comb):
        """mHC layers: the stand-in's output is already complete."""
        return hidden_states


class StandInEmbedding(nn.Module):
    """Token ids -> deterministic hidden states (first stage)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size

    def forward(self, input_ids):
        width = self.hidden_size
        base = input_ids.to(torch.float32).unsqueeze(-1) / width
        return torch.sin(base + torch.arange(width, dtype=torch.float32))


class StandInNorm(nn.Module):
    def forward(self, hidden_states, residual=None, **kwargs):
        if residual is None:
            return hidden_states * 0.5
        return (hidden_states + residual) * 0.5, residual


class RecordingLogitsProcessor(nn.Module):
    """Stands in for LogitsProcessor: returns what the last stage hands it."""

    def forward(self, input_ids, hidden_states, lm_head, forward_batch, *args, **kw):
        aux = kw.get("aux_hidden_states", args[0] if args else None)
        return SimpleNamespace(hidden_states=hidden_states, aux_hidden_states=aux)


class StandInPPGroup:
    """The attributes of SGLang's GroupCoordinator that model code reads."""

    def __init__(self, rank: int, size: int, group=None) -> None:
        self.rank_in_group = rank
        self.world_size = size
        self.ranks = list(range(size))
        self.rank = rank
        self.is_first_rank = rank == 0
        self.is_last_rank = rank == size - 1
        self.cpu_group = group
        self.device_group = group
        self.local_rank = 0
        self.first_rank = 0
        self.last_rank = size - 1


def _forward_batch(tokens: int):
    mode = SimpleNamespace(
        is_idle=lambda: tokens == 0,
        is_extend=lambda: True,
        is_decode=lambda: False,
        is_target_verify=lambda: False,
        is_context_parallel_extend=lambda: False,
    )
    return SimpleNamespace(
        positions=torch.arange(tokens),
        attn_cp_metadata=None,
        # Multimodal rope positions of a text-only batch: the same on every section.
        mrope_positions=torch.arange(tokens).expand(3, tokens),
        capture_hidden_mode=SimpleNamespace(need_capture=lambda: True),
        can_run_tbo=False,
        contains_mm_inputs=lambda: False,
        contains_image_inputs=lambda: False,
        input_embeds=None,
        forward_mode=mode,
        return_hidden_states_before_norm=False,
        batch_size=1,
        seq_lens=torch.tensor([tokens]),
        residual_stream=None,
        extend_seq_lens=torch.tensor([tokens]),
        aux_hidden_states_buffer=None,
    )


#: Extra decoder-stack attributes a model's forward reads (its __init__ is skipped).
STACK_ATTRIBUTES = {
    "DeepseekV2Model": dict(
        use_dsa=False,
        first_k_dense_replace=0,
        llama_4_scaling_config=None,
        next_full_attention_layer_id={},
        enable_a2a_moe=False,
        gemm_output_zero_allocator_size=0,
    ),
    "NemotronHModel": dict(norm_f=StandInNorm()),
    "Glm5NextModel": dict(
        dflash_capture=False, enable_a2a_moe=False, first_k_dense_replace=0
    ),
    "Qwen3_5ForCausalLM": dict(
        flashinfer_mnnvl_cutedsl_fusion=None, hidden_size=HIDDEN_SIZE
    ),
    "BailingMoELinearModel": dict(capture_aux_hidden_states=False),
    # No per-layer embeddings (PLE): the real helpers return None.
    "Gemma4TextModel": dict(
        embed_tokens_per_layer=None, per_layer_model_projection=None
    ),
    "MiniMaxM3Model": dict(finalize_norm=None),
    "Qwen3LLMModel": dict(
        use_hf_deepstack_order=False,
        deepstack_embed_to_decoder_layer=range(0),
        hidden_size=HIDDEN_SIZE,
    ),
    "Qwen3MoeLLMModel": dict(
        use_hf_deepstack_order=False,
        deepstack_embed_to_decoder_layer=range(0),
        hidden_size=HIDDEN_SIZE,
    ),
    # The standard residual path (no attention-residual bank).
    "KimiK3LinearModel": dict(
        dspark_layers_to_capture=None,
        carries_bank_slices=False,
        attn_bank=None,
        _final_read=StandInNorm(),
        alt_streams=None,
        _dp_attention=False,
        _trim_padded_attn=False,
    ),
    "DeepseekV4Model": dict(
        dspark_layers_to_capture=None,
        hc_mult=2,
        hidden_size=HIDDEN_SIZE,
        use_fused_mhc_post_pre=False,
        hc_pre_from_prev_sublayer=False,
        late_layer_start=None,
        _can_run_tbo=lambda forward_batch: False,
        hc_head_fn=None,
        hc_head_scale=None,
        hc_head_base=None,
    ),
}


def _fold_mhc(hidden_states, *weights):
    """Folds the mHC copies back into one hidden state, as the real head (a GPU
    kernel) does."""
    return hidden_states.mean(dim=1)


#: Per decoder stack: stand-ins for methods that run GPU kernels.
STACK_STAND_INS = {"DeepseekV4Model": dict(hc_head=_fold_mhc)}
#: Decoder stacks that check their layers' types against a module-level tuple.
LAYER_TYPE_TUPLES = {"NemotronHModel": "Layers"}
#: Causal-LM attributes some forwards read (their __init__ is skipped).
OUTER_ATTRIBUTES = dict(
    is_mrope_enabled=False,
    _is_multimodal=False,
    language_model_only=True,
    lm_head_is_tied=False,
)
#: Per causal-LM class: attributes its forward reads that its __init__ would set.
OUTER_CLASS_ATTRIBUTES = {
    # 0.5.21 / 0.5.22: the forward checks for a vision tower (None: text only).
    "DeepseekV4ForCausalLM": dict(vision=None),
}
#: Causal-LM classes that hold the decoder stack as ``language_model``.
LANGUAGE_MODEL_OUTERS = {"Gemma4ForConditionalGeneration"}
#: Causal-LM classes that take exactly one of input_ids and input_embeds.
IDS_ONLY_OUTERS = {"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"}
#: Modules whose decoder layers return (hidden_states, residual, extra).
THREE_OUTPUT_LAYERS = {"DeepseekV2Model", "Glm5NextModel", "KimiK3LinearModel"}
#: Modules whose layer-entry decoder layers return (hidden_states, topk_indices).
PAIR_ENTRY_LAYERS = {"DeepseekV2Model", "Glm5NextModel"}
#: Modules whose decoder layers return four values (mHC).
FOUR_OUTPUT_LAYERS = {"DeepseekV4Model"}


def _single_device_widths() -> None:
    """Parallel widths a forward reads that a launched server would have published
    (one rank per attention-DP / TP group here)."""
    from sglang.srt.runtime_context import get_parallel

    override = getattr(get_parallel(), "override_permanently", None)
    if override is not None:  # releases that derive the width publish it this way
        override(attn_dp_size=1)


def _has_module(name: str) -> bool:
    """Whether this SGLang release has module ``name`` (some are newer than others)."""
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _deepseek_v4_state() -> None:
    """Widths, and the forward context whose attention backend the stack reads (on
    releases that have one; the stand-in layers never use it)."""
    _single_device_widths()
    if not _has_module("sglang.srt.model_executor.forward_context"):
        return
    from sglang.srt.model_executor import forward_context

    forward_context.set_forward_context(
        forward_context.ForwardContext(attn_backend=SimpleNamespace())
    )


#: Per decoder stack: process state its forward reads that a server would have set up.
STACK_SETUP = {"DeepseekV4Model": _deepseek_v4_state}


def _outside_forward() -> None:
    """No forward context left set (by ``STACK_SETUP``): a server builds a model
    outside any forward."""
    if _has_module("sglang.srt.model_executor.forward_context"):
        from sglang.srt.model_executor import forward_context

        forward_context.set_forward_context(None)


def set_pp_group(group: StandInPPGroup) -> None:
    from sglang.srt.distributed import parallel_state

    parallel_state._PP = group
    # Hooks that ask ``get_parallel().pp_group`` read the runtime context; where it
    # does not resolve to the group just set, state the group there too.
    if not _has_module("sglang.srt.runtime_context"):
        return
    from sglang.srt.runtime_context import get_parallel

    try:
        if get_parallel().pp_group is group:
            return
    except (AssertionError, AttributeError, RuntimeError, ValueError):
        pass  # not published in this process
    override = getattr(get_parallel(), "override_permanently", None)
    if override is not None:
        override(pp_group=group, pp_size=group.world_size, pp_rank=group.rank_in_group)


def _code_names(function):
    """The global and attribute names ``function``'s own code reads (decorators such as
    ``torch.no_grad()`` unwrapped)."""
    import inspect

    return getattr(inspect.unwrap(function), "__code__", None).co_names


def _stores_attribute(function, name: str) -> bool:
    """Whether ``function``'s bytecode assigns attribute ``name`` (``x.name = ...``)."""
    import dis
    import inspect

    if function is None:
        return False
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return False
    return any(
        instruction.opname == "STORE_ATTR" and instruction.argval == name
        for instruction in dis.get_instructions(code)
    )


def _keeps_config(cls) -> bool:
    """Whether the constructor of ``cls`` (or of a base class) sets ``self.config``."""
    return any(
        _stores_attribute(klass.__dict__.get("__init__"), "config")
        for klass in cls.__mro__
    )


def _tiny_model(module_name: str, outer_name: str):
    """The key of ``TINY_MODELS`` that builds ``outer_name`` of ``module_name``."""
    for name, (module, cls_name, _, _) in TINY_MODELS.items():
        if (module, cls_name) == (module_name, outer_name):
            return name
    return None


def _constructed(outer_cls, name: str):
    """``outer_cls`` built through its ``__init__`` with the tiny config ``name``,
    ``NUM_LAYERS`` deep, on the PP stage set up last (``set_pp_group``)."""
    with torch.device("cpu"):
        return outer_cls(config=tiny_config(name, NUM_LAYERS))


def _width(model) -> int:
    """The hidden size of the causal LM's text stack."""
    return (getattr(model.config, "text_config", None) or model.config).hidden_size


def _assembled(outer_cls, inner_cls, start: int, end: int, pp_group):
    """The causal LM and its decoder stack without their ``__init__`` (where
    ``build_model`` cannot run it), with the attributes their forwards read."""
    config = SimpleNamespace(
        num_hidden_layers=NUM_LAYERS,
        hidden_size=HIDDEN_SIZE,
        torch_dtype=torch.float32,
        vocab_size=32,
        tie_word_embeddings=False,
        encoder_only=False,
        mhc=False,
        pad_token_id=0,
        image_token_id=-1,  # multimodal token ids no stand-in input holds
        video_token_id=-2,
        audio_token_id=-3,
        attn_res_block_size=None,  # Kimi-K3: no attention-residual bank
    )
    config.text_config = config
    inner = inner_cls.__new__(inner_cls)
    nn.Module.__init__(inner)
    if _keeps_config(inner_cls):  # as the real stack: some keep no config
        inner.config = config
    inner.pp_group = pp_group
    if isinstance(getattr(inner_cls, "start_layer", None), property):
        inner._start_layer, inner._end_layer = start, end
    else:
        inner.start_layer, inner.end_layer = start, end
    inner.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
    inner.layers_to_capture = []
    inner.norm = StandInNorm()
    inner.embed_tokens = StandInEmbedding(HIDDEN_SIZE)
    inner.word_embeddings = StandInEmbedding(HIDDEN_SIZE)
    for attribute, value in STACK_ATTRIBUTES.get(inner_cls.__name__, {}).items():
        setattr(inner, attribute, value)
    outer = outer_cls.__new__(outer_cls)
    nn.Module.__init__(outer)
    outer.config = config
    outer.pp_group = pp_group
    outer.model = inner
    if outer_cls.__name__ in LANGUAGE_MODEL_OUTERS:
        outer.language_model = inner
    outer.capture_aux_hidden_states = False
    outer.lm_head = nn.Identity()
    for attribute, value in OUTER_ATTRIBUTES.items():
        if not hasattr(outer_cls, attribute):
            setattr(outer, attribute, value)
    for attribute, value in OUTER_CLASS_ATTRIBUTES.get(outer_cls.__name__, {}).items():
        setattr(outer, attribute, value)
    return outer


def fill_weights(model: nn.Module) -> None:
    """Every floating-point parameter filled from a generator seeded by its name, so
    that a stage holds the same values as the single-stage model under that name."""
    for name, parameter in model.named_parameters():
        if parameter.is_floating_point():
            generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            values = torch.randn(parameter.shape, generator=generator)
            with torch.no_grad():
                parameter.copy_(values / max(parameter.shape[-1], 1) ** 0.5)


def _stand_in(module: nn.Module, attribute: str, value: nn.Module) -> None:
    """``module.attribute = value`` where the stage holds a real one."""
    from sglang.srt.layers.utils import PPMissingLayer

    held = getattr(module, attribute, None)
    if isinstance(held, nn.Module) and not isinstance(held, PPMissingLayer):
        setattr(module, attribute, value)


def build_model(case, pp_rank: int, pp_size: int, group):
    """The causal-LM object of ``case`` for one PP stage, built through its
    ``__init__`` with a tiny config, with stand-in layers, embedding, norm and logits
    processor, and weights filled by name (``fill_weights``)."""
    import importlib

    from sglang.srt.distributed import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer

    module_name, outer_name, inner_name, _ = case
    module = importlib.import_module(f"sglang.srt.models.{module_name}")
    outer_cls = getattr(module, outer_name)
    inner_cls = module
    for part in inner_name.split("."):  # "Qwen2Model" or "qwen3_5.Qwen3_5ForCausalLM"
        inner_cls = getattr(inner_cls, part)
    pp_group = StandInPPGroup(pp_rank, pp_size, group)
    set_pp_group(pp_group)
    start, end = get_pp_indices(NUM_LAYERS, pp_rank, pp_size)
    _outside_forward()
    # @@if native_cpu_activation
    name = _tiny_model(module_name, outer_name)
    # @@else native_cpu_activation
    # No __init__: this release's activation layers need vllm's kernels off CUDA.
    name = None
    # @@end native_cpu_activation
    if name is None:  # no tiny config of this class: assembled without __init__
        outer = _assembled(outer_cls, inner_cls, start, end, pp_group)
    else:
        outer = _constructed(outer_cls, name)
    setup = STACK_SETUP.get(inner_cls.__name__)
    if setup is not None:
        setup()
    inner = next(m for m in outer.modules() if isinstance(m, inner_cls))
    width = _width(outer)

    returns = 3 if inner_cls.__name__ in THREE_OUTPUT_LAYERS else 2
    if inner_cls.__name__ in FOUR_OUTPUT_LAYERS:
        returns = 4
    # Stacks that hand off with residual_batch keep the residual stream out of the
    # layers' return value.
    # (mHC layers keep their four-value convention either way.)
    entry = returns != 4 and "residual_batch" in _code_names(inner_cls.forward)
    pair = entry and inner_cls.__name__ in PAIR_ENTRY_LAYERS
    for i in range(NUM_LAYERS):
        inner.layers[i] = (
            StandInLayer(width, returns, entry, pair)
            if start <= i < end
            else PPMissingLayer()
        )
    for attribute in ("embed_tokens", "word_embeddings"):
        _stand_in(inner, attribute, StandInEmbedding(width))
    for attribute in ("norm", "norm_f"):
        _stand_in(inner, attribute, StandInNorm())
    outer.logits_processor = RecordingLogitsProcessor()
    for attribute, value in STACK_STAND_INS.get(inner_cls.__name__, {}).items():
        setattr(inner, attribute, value)
    tuple_name = LAYER_TYPE_TUPLES.get(inner_cls.__name__)
    if tuple_name is not None:
        stack_module = sys.modules[inner_cls.__module__]
        known = getattr(stack_module, tuple_name)
        if StandInLayer not in known:
            setattr(stack_module, tuple_name, (*known, StandInLayer))
    fill_weights(outer)
    return outer


def run_forward(model, tokens: int, proxy):
    """One causal-LM forward: PPProxyTensors (non-last stage) or the recorded output."""
    import inspect

    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    kwargs = {}
    width = _width(model)
    parameters = inspect.signature(model.forward).parameters
    if "pp_proxy_tensors" in parameters:
        kwargs["pp_proxy_tensors"] = None if proxy is None else PPProxyTensors(proxy)
    # The first stage gets these ids embedded by the stand-in embedding, either from
    # input_embeds or by its own embedding layer: the same values both ways.
    input_ids = torch.arange(tokens, dtype=torch.long) + 7 * tokens
    for name in ("input_embeds", "inputs_embeds"):
        ids_only = type(model).__name__ in IDS_ONLY_OUTERS
        if name in parameters and model.pp_group.is_first_rank and not ids_only:
            kwargs[name] = StandInEmbedding(width)(input_ids)
    positions = torch.arange(tokens)
    with torch.no_grad():
        return model.forward(input_ids, positions, _forward_batch(tokens), **kwargs)


def aux_list(model, aux):
    """The aux hidden states ``model`` handed its logits processor, one tensor per
    capture (packed captures split by the model's width)."""
    if aux is None:
        return []
    if isinstance(aux, torch.Tensor):
        return list(aux.split(_width(model), dim=-1))
    return list(aux)


def call_hook(model, hook, layer_ids):
    getattr(model, hook)(None if layer_ids is None else list(layer_ids))


def reference_model(case, hook, layer_ids):
    """The single-stage (PP=1) model of ``case``, its capture hook called."""
    model = build_model(case, 0, 1, None)
    call_hook(model, hook, layer_ids)
    return model


def reference_aux(model, tokens):
    """Aux states of a single-stage run of ``model`` (``reference_model``)."""
    set_pp_group(model.pp_group)
    return aux_list(model, run_forward(model, tokens, None).aux_hidden_states)
