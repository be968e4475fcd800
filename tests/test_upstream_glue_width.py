"""Where the shipped glue takes the width of one capture from (fast, one process).

The glue (``render_glue()``) runs with its SGLang imports served by the real transport
module; the handshake's collective is answered locally.  The width is the decoder
stack's ``config.hidden_size``, else its own decoder layers' ``hidden_size`` or
``config.hidden_size``; a stack that needs a transport and holds none of these raises,
naming its class.  ``test_upstream_width_real_init.py`` checks the same on the real
model classes of a patched release.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch

from codemods.upstream import pp_aux_transport
from codemods.upstream.family_patch import render_glue

NUM_LAYERS = 4


@pytest.fixture
def glue(monkeypatch):
    monkeypatch.delenv("SGLANG_PP_AUX_TRANSPORT", raising=False)
    for name in ("sglang", "sglang.srt", "sglang.srt.distributed"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(
        sys.modules, "sglang.srt.distributed.pp_aux_transport", pp_aux_transport
    )
    monkeypatch.setattr(
        pp_aux_transport,
        "_all_gather",
        lambda group, payload, size: [dict(payload, pp_rank=r) for r in range(size)],
    )
    module = types.ModuleType("sglang.srt.distributed.pp_aux_capture")
    exec(compile(render_glue(), "pp_aux_capture.py", "exec"), module.__dict__)
    return module


class _Layer(torch.nn.Module):
    def __init__(self, hidden_size=None, config=None):
        super().__init__()
        if hidden_size is not None:
            self.hidden_size = hidden_size
        if config is not None:
            self.config = config


class _Missing(torch.nn.Module):
    """Like SGLang's ``PPMissingLayer``: holds nothing."""


class NoConfigModel(torch.nn.Module):
    def __init__(self, rank, layers, config=None):
        super().__init__()
        if config is not None:
            self.config = config
        self.start_layer, self.end_layer = pp_aux_transport.layer_partition(
            NUM_LAYERS, 2
        )[rank]
        self.layers = torch.nn.ModuleList(
            layers[i] if self.start_layer <= i < self.end_layer else _Missing()
            for i in range(NUM_LAYERS)
        )
        self.layers_to_capture = [1, 3]  # one capture on each of the 2 stages


def _group(rank, size=2):
    return SimpleNamespace(
        world_size=size, rank_in_group=rank, cpu_group=None, ranks=list(range(size))
    )


def _width(glue, make_stack):
    """``pp_aux_proxy_hidden_size`` of stage 0 and stage 1 of 2."""
    widths = []
    for rank in (0, 1):
        stack = make_stack(rank)
        glue.attach_pp_aux_transport(stack, _group(rank))
        widths.append(glue.pp_aux_proxy_hidden_size(stack))
    return widths


def test_the_stacks_config_gives_the_width(glue):
    config = SimpleNamespace(hidden_size=24, num_hidden_layers=NUM_LAYERS)
    layers = [_Layer(hidden_size=8) for _ in range(NUM_LAYERS)]
    assert _width(glue, lambda r: NoConfigModel(r, layers, config)) == [0, 24]


def test_without_a_config_the_decoder_layers_give_the_width(glue):
    # GptOssModel / MiniMaxM3Model: no config on the stack, hidden_size on each layer.
    layers = [_Layer(hidden_size=16) for _ in range(NUM_LAYERS)]
    assert _width(glue, lambda r: NoConfigModel(r, layers)) == [0, 16]
    layers = [_Layer(config=SimpleNamespace(hidden_size=12)) for _ in range(NUM_LAYERS)]
    assert _width(glue, lambda r: NoConfigModel(r, layers)) == [0, 12]


def test_a_config_without_hidden_size_falls_back_to_the_layers(glue):
    config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
    layers = [_Layer(hidden_size=20) for _ in range(NUM_LAYERS)]
    assert _width(glue, lambda r: NoConfigModel(r, layers, config)) == [0, 20]


def test_no_width_anywhere_raises_naming_the_stack(glue):
    layers = [_Layer() for _ in range(NUM_LAYERS)]
    with pytest.raises(RuntimeError, match="NoConfigModel has no config.hidden_size"):
        glue.attach_pp_aux_transport(NoConfigModel(1, layers), _group(1))


def test_no_transport_needed_needs_no_width(glue):
    layers = [_Layer() for _ in range(NUM_LAYERS)]
    single = NoConfigModel(0, layers)
    glue.attach_pp_aux_transport(single, _group(0, size=1))  # PP=1
    assert single.pp_aux_transport is None
    idle = NoConfigModel(1, layers)
    idle.layers_to_capture = []
    glue.attach_pp_aux_transport(idle, _group(1))  # no capture requested
    assert glue.pp_aux_proxy_hidden_size(idle) == 0
