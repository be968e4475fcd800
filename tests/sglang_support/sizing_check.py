"""Drive the CUDA-graph sizing path of a patched SGLang tree on CPU, one process.

Usage: ``python -m sglang_support.sizing_check MODEL_MODULE CLASS``, with the patched tree
on ``PYTHONPATH`` (see ``env.sglang_env``).  For 2- and 3-stage splits and several
capture sets, every stage gets the relay the patched capture hooks set up
(``set_pp_aux_capture``, with the stage's layer range), and:

* its width comes through the real chain: ``misc_utils.resolve_pp_proxy_aux_hidden_size``
  of the patched causal-LM class -> the helpers' ``pp_aux_proxy_hidden_size(model)``,
  which finds the stack's relay;
* the real allocations (``DecodeInputBuffers.create``; ``PrefillInputBuffers.create``
  where it keeps proxy buffers, 0.5.19+; the shared ``allocate_pp_proxy_tensors`` /
  ``_allocate_pp_proxy_tensors`` where there is one) allocate the ``aux_hidden_states``
  buffer with that width;
* that width equals the width of the entry the previous stage really sends
  (``PPAuxRelay.outgoing``);
* the entry is copied into the decode buffer by the real replay loads: the registry's
  ``fill_from`` (full load) and ``DecodeCudaGraphRunner.load_batch``'s pre-planned branch
  (driven with a stand-in runner; the plan-stream load already ran); the copy the full
  load made is what the stage reads and hands on, and the last stage's captures equal
  the captures made (``torch.equal``).

On a tree without the sizing (``misc_utils`` has no ``resolve_pp_proxy_aux_hidden_size``)
the width is taken as 0, the allocations run as released and every stage that receives
the entry is reported as an error.

Prints one JSON line: ``{"checks": [...], "errors": [...], "aux_buffers": N}``
(``aux_buffers``: how many allocations held an ``aux_hidden_states`` buffer).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import types
from unittest import mock

import torch

NUM_LAYERS = 9
HIDDEN = 4
MAX_TOKENS = 16
TOKENS = (3, 0, 2)
CAPTURES = ([7, 0, 4], [1, 0], [8, 2, 5])


def _layer_range(pp_rank, pp_size):
    from sglang.srt.distributed import get_pp_indices

    return get_pp_indices(NUM_LAYERS, pp_rank, pp_size)


def _stage(glue, outer_cls, layer_ids, pp_rank, pp_size):
    """The real causal-LM class (no weights loaded) over a stand-in decoder stack the
    capture hooks' ``set_pp_aux_capture`` set up; the stack's relay."""
    start, end = _layer_range(pp_rank, pp_size)
    decoder = torch.nn.Module()
    decoder.config = types.SimpleNamespace(num_hidden_layers=NUM_LAYERS, hidden_size=HIDDEN)
    decoder.layers = [None] * NUM_LAYERS
    decoder.start_layer, decoder.end_layer = start, end
    decoder.layers_to_capture = list(layer_ids)
    group = types.SimpleNamespace(
        world_size=pp_size,
        rank_in_group=pp_rank,
        is_last_rank=pp_rank == pp_size - 1,
        cpu_group=None,
        ranks=list(range(pp_size)),
    )
    glue.set_pp_aux_capture(decoder, group, hidden_size=HIDDEN)
    outer = outer_cls.__new__(outer_cls)  # the real class, without loading weights
    torch.nn.Module.__init__(outer)
    outer.model = decoder
    return outer, decoder.pp_aux_relay


def _kwargs(function, **candidates):
    """The ``candidates`` that ``function`` takes (the signatures differ by release)."""
    parameters = inspect.signature(function).parameters
    return {name: value for name, value in candidates.items() if name in parameters}


class _Sizing:
    """The real allocation and copy functions of the tree under test."""

    def __init__(self, entry):
        self.entry = entry
        self.misc = importlib.import_module(
            "sglang.srt.model_executor.model_runner_components.misc_utils"
        )
        self.buffers = importlib.import_module("sglang.srt.model_executor.runner_utils.buffers")
        self.registry = importlib.import_module(
            "sglang.srt.model_executor.cuda_graph_buffer_registry"
        )
        self.decode_runner = importlib.import_module(
            "sglang.srt.model_executor.runner.decode_cuda_graph_runner"
        ).DecodeCudaGraphRunner
        self.proxy = importlib.import_module(
            "sglang.srt.model_executor.forward_batch_info"
        ).PPProxyTensors
        # 0.5.21 keeps the shared allocation private; 0.5.18 has none.
        self.allocate = getattr(self.buffers, "allocate_pp_proxy_tensors", None) or getattr(
            self.buffers, "_allocate_pp_proxy_tensors", None
        )
        self.resolve = getattr(self.misc, "resolve_pp_proxy_aux_hidden_size", None)
        if hasattr(self.buffers, "enable_num_token_non_padded"):
            # 0.5.21+ ask the published parallel config, which a CPU drive has none of.
            self.buffers.enable_num_token_non_padded = lambda: False
        self.prefill_has_proxy = (
            "pp_size" in inspect.signature(self.buffers.PrefillInputBuffers.create).parameters
        )

    def width(self, outer, pp_size, pp_rank):
        if self.resolve is None:
            return 0
        return self.resolve(model=outer, pp_size=pp_size, pp_rank=pp_rank)

    def decode_buffers(self, pp_size, width):
        create = self.buffers.DecodeInputBuffers.create
        return create(
            **_kwargs(
                create,
                device=torch.device("cpu"),
                max_bs=MAX_TOKENS,
                max_num_token=MAX_TOKENS,
                hidden_size=HIDDEN,
                next_token_logits_buffer=torch.zeros(MAX_TOKENS, 8),
                dtype=torch.float32,
                dp_size=1,
                num_dp_ranks=1,
                pp_size=pp_size,
                is_encoder_decoder=False,
                require_mlp_tp_gather=False,
                seq_len_fill_value=1,
                encoder_len_fill_value=0,
                num_tokens_per_req=1,
                cache_loc_dtype=torch.int64,
                enable_mamba_track=False,
                pp_proxy_aux_hidden_size=width,
            )
        )

    def allocations(self, pp_size, pp_rank, width):
        """Proxy buffers (or None) of every allocation the graph runners use."""
        found = {"decode": self.decode_buffers(pp_size, width).pp_proxy_tensors}
        if self.prefill_has_proxy:
            create = self.buffers.PrefillInputBuffers.create
            found["prefill"] = create(
                **_kwargs(
                    create,
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
            ).pp_proxy_tensors
        if self.allocate is not None:
            found["shared"] = self.allocate(
                **_kwargs(
                    self.allocate,
                    max_num_tokens=MAX_TOKENS,
                    max_hidden_tokens=MAX_TOKENS,
                    hidden_size=HIDDEN,
                    dtype=torch.float32,
                    pp_proxy_aux_hidden_size=width,
                )
            )
        return found

    def full_load(self, buffers, tokens, incoming):
        """The decode buffers after the registry's ``fill_from`` (a full replay load)."""
        build = self.registry.build_decode_registry
        registry = build(
            **_kwargs(
                build,
                device=torch.device("cpu"),
                max_bs=MAX_TOKENS,
                max_num_token=MAX_TOKENS,
                seq_len_fill_value=1,
                cache_loc_dtype=torch.int64,
                source=buffers,
            )
        )
        registry.fill_from(
            types.SimpleNamespace(),
            raw_bs=tokens,
            padded_bs=tokens,
            raw_num_tokens=tokens,
            padded_num_tokens=tokens,
            pp_proxy_tensors=self.proxy(dict(incoming)),
        )
        return buffers.pp_proxy_tensors

    def pre_planned_load(self, buffers, tokens, incoming):
        """The decode buffers after ``load_batch``'s pre-planned branch."""
        runner = mock.MagicMock()
        runner.buffers = buffers
        runner.raw_num_token = tokens
        runner.ragged_verify_mode = False
        runner.dllm_uses_input_embeds = False
        runner.dllm_input_preparation = None
        runner.enable_pdmux = False
        batch = types.SimpleNamespace(
            needs_forward_metadata_init=lambda: False,
            input_ids=torch.zeros(tokens, dtype=torch.int64),
            positions=torch.zeros(tokens, dtype=torch.int64),
            input_embeds=None,
        )
        self.decode_runner.load_batch(runner, batch, self.proxy(dict(incoming)))
        return buffers.pp_proxy_tensors


def _copied(label, how, tensors, entry, sent, errors):
    rows = sent.shape[0]
    got = None if tensors is None else tensors.get(entry)
    if got is None or not torch.equal(got[:rows], sent):
        errors.append(f"{label}: the {how} load did not copy the incoming {entry}")
        return None
    return got[:rows]


def main() -> None:
    module_name, class_name = sys.argv[1], sys.argv[2]
    outer_cls = getattr(importlib.import_module(module_name), class_name)
    glue = importlib.import_module("sglang.srt.layers.aux_hidden_states")
    entry = glue.AUX_ENTRY
    sizing = _Sizing(entry)
    checks, errors, aux_buffers = [], [], 0
    if sizing.resolve is None:
        errors.append("misc_utils has no resolve_pp_proxy_aux_hidden_size")
    generator = torch.Generator().manual_seed(0)
    for pp_size in (2, 3):
        for layer_ids in CAPTURES:
            for tokens in TOKENS:
                made = {i: torch.randn(tokens, HIDDEN, generator=generator) for i in layer_ids}
                handoff = {}
                for pp_rank in range(pp_size):
                    outer, relay = _stage(glue, outer_cls, layer_ids, pp_rank, pp_size)
                    width = sizing.width(outer, pp_size, pp_rank)
                    sent = handoff.get(entry)
                    sent_width = 0 if sent is None else sent.shape[-1]
                    found = sizing.allocations(pp_size, pp_rank, width)
                    label = f"pp={pp_size} ids={layer_ids} tokens={tokens} stage={pp_rank}"
                    widths = {
                        name: tensors[entry].shape[-1] if tensors and entry in tensors else 0
                        for name, tensors in found.items()
                    }
                    aux_buffers += sum(1 for w in widths.values() if w)
                    checks.append([label, width, sent_width, widths])
                    if set(widths.values()) != {sent_width} or width != sent_width:
                        errors.append(
                            f"{label}: allocated {widths}, resolved {width}, "
                            f"previous stage sent {sent_width}"
                        )
                        break
                    incoming = {}
                    if sent is not None:
                        full = dict(handoff)
                        full["hidden_states"] = torch.randn(tokens, HIDDEN, generator=generator)
                        full["residual"] = torch.randn(tokens, HIDDEN, generator=generator)
                        for how, load in (
                            ("pre-planned", sizing.pre_planned_load),
                            ("full", sizing.full_load),
                        ):
                            buffers = sizing.decode_buffers(pp_size, width)
                            copied = _copied(
                                label, how, load(buffers, tokens, full), entry, sent, errors
                            )
                        if copied is None:
                            break
                        incoming[entry] = copied  # what the replayed graph reads
                    if relay is None:  # no capture taken on any stage
                        continue
                    own = {i: made[i] for i in relay.local_layer_ids}
                    if relay.is_last_stage:
                        got = relay.collect(own, incoming)
                        want = [made[i] for i in sorted(layer_ids)]
                        same = len(got) == len(want) and all(
                            torch.equal(a, b) for a, b in zip(got, want, strict=True)
                        )
                        if not same:
                            errors.append(f"{label}: captures differ from those made")
                    else:
                        handoff = relay.outgoing(own, incoming)
    print(json.dumps({"checks": checks, "errors": errors, "aux_buffers": aux_buffers}))


if __name__ == "__main__":
    main()
