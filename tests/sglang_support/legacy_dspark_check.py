"""Drive an out-of-tree model written for the release's DSPARK relay through a patched
SGLang 0.5.21+ tree on CPU, one process.

Usage: ``python -m sglang_support.legacy_dspark_check``, with the patched tree on
``PYTHONPATH`` (see ``env.sglang_env``).  The model is shaped like Kimi-Linear's
contract on the release: it defines ``set_dspark_layers_to_capture`` and
``get_pp_proxy_dspark_hidden_size`` (hidden size times the captured layers before its
stage), declares no ``pp_aux_relay_methods``, and a stage that is not the last sends its
captures in the ``dspark_hidden_states`` entry.  With SGLang's own functions:

* ``configure_aux_hidden_state_capture(..., is_dspark=True, pp_size=2)`` on it
  (``admitted``: it did not raise and set the layers), and on the same class without the
  old width method (``refused``: the ``NotImplementedError`` text, or None);
* ``ModelRunner.get_pp_proxy_aux_hidden_size`` / ``get_pp_proxy_aux_entry`` (on a
  stand-in runner holding the model and a PP group) for stage 1 of 2 (``width``,
  ``entry``), and ``entry`` for a model that defines ``get_pp_proxy_aux_hidden_size``
  (``new_entry``); a tree without ``get_pp_proxy_aux_entry`` reports None for both and
  its buffers are allocated without an entry name;
* the buffers of ``DecodeInputBuffers.create``, ``PrefillInputBuffers.create`` and
  ``allocate_pp_proxy_tensors`` with those (``buffers``: name -> {key: width}), and of
  ``base_runner._allocate_decode_buffers`` (``dummy``);
* the replay loads (the registry's ``fill_from`` and ``load_batch``'s pre-planned branch,
  ``sizing_check._Sizing``) with the entry stage 0 of the model really sends
  (``refreshed``: load -> whether the buffer holds it);
* ``resolve_pp_proxy_dspark_hidden_size`` and ``allocate_pp_proxy_tensors(
  pp_proxy_dspark_hidden_size=)`` (``old_resolver``, ``old_keyword``: {key: width}), with
  the log records SGLang's loggers emitted for each call (``warnings``).

Prints one JSON line with those fields.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import types
from unittest import mock

import torch

from sglang_support.sizing_check import HIDDEN, MAX_TOKENS, _kwargs, _Sizing

NUM_LAYERS = 4
LAYER_IDS = [0, 1, 3]
TOKENS = 3


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def take(self) -> list[str]:
        taken, self.messages = self.messages, []
        return taken


class _Stack(torch.nn.Module):
    """The decoder stack of the release's DSPARK relay (Kimi-Linear's shape)."""

    def __init__(self, pp_rank, pp_size):
        super().__init__()
        self.pp_rank, self.pp_size = pp_rank, pp_size
        per = NUM_LAYERS // pp_size
        self.start_layer, self.end_layer = pp_rank * per, (pp_rank + 1) * per
        self.dspark_layers_to_capture = None

    def forward(self, hidden_states, pp_proxy_tensors):
        aux = []
        if self.dspark_layers_to_capture is not None and self.pp_rank > 0:
            aux.append(pp_proxy_tensors["dspark_hidden_states"])
        for i in range(self.start_layer, self.end_layer):
            hidden_states = hidden_states + 1
            if self.dspark_layers_to_capture is not None and i in self.dspark_layers_to_capture:
                aux.append(hidden_states)
        if self.pp_rank < self.pp_size - 1:
            tensors = {"hidden_states": hidden_states}
            if aux:
                tensors["dspark_hidden_states"] = torch.cat(aux, dim=-1)
            return tensors
        return hidden_states, aux


class OutOfTreeDSpark(torch.nn.Module):
    """A causal LM written against the release's DSPARK relay contract."""

    def __init__(self, pp_rank=1, pp_size=2):
        super().__init__()
        self.config = types.SimpleNamespace(hidden_size=HIDDEN)
        self.model = _Stack(pp_rank, pp_size)
        self.capture_aux_hidden_states = False

    def get_pp_proxy_dspark_hidden_size(self) -> int:
        layers = self.model.dspark_layers_to_capture or []
        return self.config.hidden_size * sum(layer < self.model.start_layer for layer in layers)

    def set_dspark_layers_to_capture(self, layer_ids):
        self.capture_aux_hidden_states = True
        self.model.dspark_layers_to_capture = list(layer_ids)

    def forward(self, hidden_states, pp_proxy_tensors=None):
        return self.model(hidden_states, pp_proxy_tensors)


class WithoutOldWidth(OutOfTreeDSpark):
    """The same model without the release's width method (it relays nothing it declares)."""

    get_pp_proxy_dspark_hidden_size = None  # type: ignore[assignment]


class WithNewWidth(OutOfTreeDSpark):
    """A model sized under the renamed method."""

    def get_pp_proxy_aux_hidden_size(self) -> int:
        return OutOfTreeDSpark.get_pp_proxy_dspark_hidden_size(self)


def _configure(setup, model):
    """The error text ``configure_aux_hidden_state_capture`` raised, or None."""
    try:
        setup.configure_aux_hidden_state_capture(
            model=model,
            eagle_use_aux_hidden_state=False,
            eagle_aux_hidden_state_layer_ids=None,
            dflash_use_aux_hidden_state=True,
            dflash_target_layer_ids=LAYER_IDS,
            is_dspark=True,
            pp_size=2,
        )
    except NotImplementedError as err:
        return str(err)
    return None


def _runner(model):
    """A stand-in ``ModelRunner`` that holds ``model`` on stage 1 of 2."""
    return types.SimpleNamespace(
        model=model,
        pp_size=2,
        pp_rank=1,
        pp_group=types.SimpleNamespace(world_size=2, rank_in_group=1),
    )


def _widths(tensors):
    return None if tensors is None else {key: t.shape[-1] for key, t in tensors.items()}


def _dummy(base_runner, width, entry):
    allocate = base_runner._allocate_decode_buffers
    candidates = dict(
        device=torch.device("cpu"),
        max_bs=MAX_TOKENS,
        max_num_token=MAX_TOKENS,
        hidden_size=HIDDEN,
        vocab_size=8,
        dtype=torch.float32,
        is_encoder_decoder=False,
        require_mlp_tp_gather=False,
        seq_len_fill_value=1,
        encoder_len_fill_value=0,
        num_tokens_per_req=1,
        cache_loc_dtype=torch.int64,
        enable_mamba_track=False,
        pp_proxy_aux_hidden_size=width,
        pp_proxy_aux_entry=entry,
        allocate_logits_buffer=False,
    )
    missing = [
        name
        for name, p in inspect.signature(allocate).parameters.items()
        if p.default is inspect.Parameter.empty and p.kind is p.KEYWORD_ONLY
        if name not in candidates
    ]
    if missing:
        return f"unknown parameters {missing}"
    parallel = types.SimpleNamespace(pp_size=2, pp_rank=1, dp_size=1, attn_dp_size=1)
    with mock.patch.object(base_runner, "get_parallel", lambda: parallel):
        with mock.patch.object(base_runner, "enable_num_token_non_padded", lambda: False):
            return _widths(allocate(**_kwargs(allocate, **candidates)).pp_proxy_tensors)


def main() -> None:
    records = _Records()
    logging.getLogger("sglang").addHandler(records)
    logging.getLogger("sglang").setLevel(logging.WARNING)
    setup = importlib.import_module(
        "sglang.srt.model_executor.model_runner_components.attention_backend_setup"
    )
    runner_cls = importlib.import_module("sglang.srt.model_executor.model_runner").ModelRunner
    base_runner = importlib.import_module("sglang.srt.model_executor.runner.base_runner")
    glue = importlib.import_module("sglang.srt.layers.aux_hidden_states")
    sizing = _Sizing(glue.AUX_ENTRY)
    report: dict = {"warnings": {}}

    model = OutOfTreeDSpark()
    report["admitted"] = _configure(setup, model) is None and (
        model.model.dspark_layers_to_capture == LAYER_IDS
    )
    report["refused"] = _configure(setup, WithoutOldWidth())
    if not report["admitted"]:
        # Size it all the same: the buffers are checked on their own.
        model.set_dspark_layers_to_capture(LAYER_IDS)
    records.take()

    width = runner_cls.get_pp_proxy_aux_hidden_size(_runner(model))
    report["warnings"]["width"] = records.take()
    # A tree without the entry lookup keys the buffers as the glue's entry.
    entry_of = getattr(runner_cls, "get_pp_proxy_aux_entry", None)
    entry = glue.AUX_ENTRY if entry_of is None else entry_of(_runner(model))
    report["width"], report["entry"] = width, None if entry_of is None else entry
    new_model = WithNewWidth()
    new_model.set_dspark_layers_to_capture(LAYER_IDS)
    report["new_entry"] = None if entry_of is None else entry_of(_runner(new_model))

    common = dict(pp_proxy_aux_hidden_size=width, pp_proxy_aux_entry=entry)
    decode = sizing.buffers.DecodeInputBuffers.create
    prefill = sizing.buffers.PrefillInputBuffers.create
    report["buffers"] = {
        "decode": _widths(_decode(sizing, decode, **common).pp_proxy_tensors),
        "prefill": _widths(
            prefill(
                **_kwargs(
                    prefill,
                    device=torch.device("cpu"),
                    max_bs=4,
                    max_num_tokens=MAX_TOKENS,
                    cache_loc_dtype=torch.int64,
                    is_multimodal=False,
                    hidden_size=HIDDEN,
                    dtype=torch.float32,
                    enable_mamba_track=False,
                    pp_size=2,
                    is_first_pp_rank=False,
                    **common,
                )
            ).pp_proxy_tensors
        ),
        "shared": _widths(
            sizing.allocate(
                **_kwargs(
                    sizing.allocate,
                    max_num_tokens=MAX_TOKENS,
                    max_hidden_tokens=MAX_TOKENS,
                    hidden_size=HIDDEN,
                    dtype=torch.float32,
                    **common,
                )
            )
        ),
    }
    report["dummy"] = _dummy(base_runner, width, entry)

    # What stage 0 of the same model really sends, copied in by the replay loads.
    first = OutOfTreeDSpark(pp_rank=0)
    first.set_dspark_layers_to_capture(LAYER_IDS)
    sent = first(torch.randn(TOKENS, HIDDEN))
    report["sent"] = _widths(sent)
    report["refreshed"] = {}
    for how, load in (("pre-planned", sizing.pre_planned_load), ("full", sizing.full_load)):
        buffers = _decode(sizing, decode, **common)
        loaded = load(buffers, TOKENS, sent)
        got = (loaded or {}).get(entry)
        report["refreshed"][how] = got is not None and torch.equal(
            got[:TOKENS], sent["dspark_hidden_states"]
        )
    records.take()

    old = getattr(sizing.misc, "resolve_pp_proxy_dspark_hidden_size", None)
    report["old_resolver"] = None if old is None else old(model=model, pp_size=2, pp_rank=1)
    report["warnings"]["old_resolver"] = records.take()
    try:
        report["old_keyword"] = _widths(
            sizing.allocate(
                max_num_tokens=MAX_TOKENS,
                max_hidden_tokens=MAX_TOKENS,
                hidden_size=HIDDEN,
                dtype=torch.float32,
                pp_proxy_dspark_hidden_size=width,
            )
        )
    except TypeError as err:
        report["old_keyword"] = f"raised {err}"
    report["warnings"]["old_keyword"] = records.take()
    print(json.dumps(report))


def _decode(sizing, create, **sized):
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
            pp_size=2,
            is_encoder_decoder=False,
            require_mlp_tp_gather=False,
            seq_len_fill_value=1,
            encoder_len_fill_value=0,
            num_tokens_per_req=1,
            cache_loc_dtype=torch.int64,
            enable_mamba_track=False,
            **sized,
        )
    )


if __name__ == "__main__":
    main()
