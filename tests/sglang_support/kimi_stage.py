"""Pipeline stages of SGLang's real ``KimiLinearForCausalLM`` (patched or not), on CPU.

``kimi_stage_factory(spec, pp_rank, pp_size, transport_kwargs)`` is the picklable stage
factory for ``codemods.ppcheck.run_scenario``: it imports ``sglang.srt.models.kimi_linear``
from whatever SGLang tree is first on ``sys.path`` (a patched copy or the release as is),
builds the stage's ``KimiLinearModel`` and ``KimiLinearForCausalLM`` with the stand-ins of
``stages.py``, and calls the file's real ``set_dspark_layers_to_capture`` with the
scenario's layer ids.  Layer ranges come from SGLang's own ``get_pp_indices``.

``spec`` keys used: ``num_layers``, ``hidden_size``, ``layer_ids``; optional ``bypass_setter``
(store the ids on the inner model directly, on every rank, as if the PP guard were gone,
to show what the unpatched forward does with them).
``transport_kwargs`` keys used: ``group``, ``direct_group``, ``ranks`` — they become the fake
PP group's ``cpu_group``, ``device_group`` and ``ranks``; the patched setter hands the group
to the glue's ``attach_pp_aux_transport``, which takes the mode from
``SGLANG_PP_AUX_TRANSPORT`` and, in direct mode, makes its own direct-send groups.

The stage's ``forward(mb, hidden_in, proxy)`` returns the handoff dict on non-last stages and
``(hidden_states, aux_list)`` on the last, where ``aux_list`` is what the model handed the
logits processor.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from sglang_support.stages import (
    DTYPE,
    FakePPGroup,
    NullExpertRecorder,
    RecordingLogitsProcessor,
    StandInEmbedding,
    StandInNorm,
    bare,
    patch_globals,
    stage_layers,
)

MODEL_MODULE = "sglang.srt.models.kimi_linear"


def _spec(spec: Any, key: str, default: Any = None) -> Any:
    if isinstance(spec, dict):
        return spec.get(key, default)
    return getattr(spec, key, default)


def _dtype(spec: Any) -> torch.dtype:
    name = _spec(spec, "dtype")
    return getattr(torch, name) if isinstance(name, str) else DTYPE


class KimiStage:
    """One pipeline stage around a real ``KimiLinearForCausalLM`` instance."""

    def __init__(self, lm: Any, proxy_cls: type, group: FakePPGroup, module: Any) -> None:
        self.module = module
        self.lm = lm
        self.proxy_cls = proxy_cls
        self.group = group

    @property
    def logits_processor(self) -> RecordingLogitsProcessor:
        return self.lm.logits_processor

    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        # Several stages may share one process (in-process chains): point the module's
        # get_pp_group at this stage's group for this call.
        patch_globals(self.module, get_pp_group=lambda: self.group)
        forward_batch = SimpleNamespace(microbatch=mb)
        if self.group.is_first_rank:
            assert hidden_in is not None
            tokens = hidden_in.shape[0]
            pp_proxy = None
        else:
            assert proxy is not None
            tokens = proxy["hidden_states"].shape[0]
            pp_proxy = self.proxy_cls(dict(proxy))
        positions = torch.arange(tokens)
        out = self.lm.forward(
            None,
            positions,
            forward_batch,
            hidden_in if self.group.is_first_rank else None,
            pp_proxy,
        )
        if not self.group.is_last_rank:
            return dict(out.tensors)
        aux = out.aux_hidden_states
        return out.hidden_states, list(aux) if aux is not None else []


def build_kimi_stage(
    spec: Any, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> KimiStage:
    import importlib

    module = importlib.import_module(MODEL_MODULE)
    from sglang.srt.distributed.utils import get_pp_indices
    from sglang.srt.layers.utils import PPMissingLayer
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    transport_kwargs = dict(transport_kwargs or {})
    num_layers = int(_spec(spec, "num_layers"))
    hidden_size = int(_spec(spec, "hidden_size", _spec(spec, "hidden", 8)))
    layer_ids = list(_spec(spec, "layer_ids"))
    group = FakePPGroup.for_transport(pp_rank, pp_size, transport_kwargs)
    patch_globals(
        module,
        get_pp_group=lambda: group,
        get_global_expert_distribution_recorder=NullExpertRecorder,
    )
    config = SimpleNamespace(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        vocab_size=32,
        pad_token_id=0,
        dtype=_dtype(spec),
        rms_norm_eps=1e-6,
        num_attention_heads=1,
    )
    start, end = get_pp_indices(num_layers, pp_rank, pp_size)

    model = bare(module.KimiLinearModel)
    model.config = config
    model.padding_idx = config.pad_token_id
    model.vocab_size = config.vocab_size
    model.pp_group = group
    model.dspark_layers_to_capture = None
    if hasattr(module, "PPAuxRelay"):
        # The patched __init__ sets this; the unpatched one has no such attribute.
        model.pp_aux_relay = None
    model.embed_tokens = StandInEmbedding(hidden_size) if group.is_first_rank else PPMissingLayer()
    model.alt_stream = None
    model.layers = stage_layers(num_layers, start, end, PPMissingLayer)
    model.start_layer, model.end_layer = start, end
    model.norm = StandInNorm() if group.is_last_rank else PPMissingLayer()

    lm = bare(module.KimiLinearForCausalLM)
    lm.config = config
    lm.quant_config = None
    lm.model = model
    lm.start_layer, lm.end_layer = start, end
    lm.pp_group = group
    lm.lm_head = torch.nn.Identity() if group.is_last_rank else PPMissingLayer()
    lm.logits_processor = RecordingLogitsProcessor()
    lm.capture_aux_hidden_states = False

    if _spec(spec, "bypass_setter", False):
        lm.capture_aux_hidden_states = True
        model.dspark_layers_to_capture = list(layer_ids)
    else:
        lm.set_dspark_layers_to_capture(layer_ids)
    return KimiStage(lm, PPProxyTensors, group, module)


def build_entry_stage(
    spec: Any, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> KimiStage:
    """A stage built by running the module's own constructors: ``EntryClass(config)``.

    For model files whose ``__init__`` runs on CPU as is (the synthetic fixtures over the
    mini ``sglang`` tree of ``fixtures/upstream/mini_sglang``): installs the fake PP group
    with ``sglang.srt.distributed.set_pp_group`` and calls the setter like SGLang does.
    """
    import importlib

    module = importlib.import_module(MODEL_MODULE)
    distributed = importlib.import_module("sglang.srt.distributed")
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    transport_kwargs = dict(transport_kwargs or {})
    group = FakePPGroup.for_transport(pp_rank, pp_size, transport_kwargs)
    distributed.set_pp_group(group)
    patch_globals(module, get_pp_group=lambda: group)
    config = SimpleNamespace(
        num_hidden_layers=int(_spec(spec, "num_layers")),
        hidden_size=int(_spec(spec, "hidden_size", 8)),
        vocab_size=32,
        pad_token_id=0,
        dtype=_dtype(spec),
    )
    lm = module.EntryClass(config)
    lm.set_dspark_layers_to_capture(list(_spec(spec, "layer_ids")))
    return KimiStage(lm, PPProxyTensors, group, module)


def kimi_stage_factory(
    spec: Any, pp_rank: int, pp_size: int, transport_kwargs: dict | None = None
) -> KimiStage:
    """Picklable stage factory (see module docstring); ``spec["construct"]`` selects
    :func:`build_entry_stage` (run the file's constructors) over the bare build."""
    if _spec(spec, "construct", False):
        return build_entry_stage(spec, pp_rank, pp_size, transport_kwargs)
    return build_kimi_stage(spec, pp_rank, pp_size, transport_kwargs)
