"""``graph_sizing_legacy.py`` adds the aux entry's sizing path to a tree that sizes only
the residual bank (the shape of SGLang 0.5.18-0.5.20), checked on small modules in that
shape: the results are executed and their allocations and copies inspected."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.runtime import render_glue
from codemods.upstream.sizing.graph_sizing import SizingError
from codemods.upstream.sizing.graph_sizing_legacy import (
    add_buffer_sizing,
    add_pre_planned_refresh,
    add_resolver,
    add_runner_argument,
    add_runner_method,
)

MISC = """\
from typing import Any, Optional


def resolve_pp_proxy_residual_num_blocks(
    *, model_config: Any, pp_size: int, pp_rank: int, start_layer: int
) -> Optional[int]:
    if pp_size <= 1 or pp_rank == 0:
        return None
    return start_layer
"""

RUNNER = """\
class ModelRunner:
    def get_pp_proxy_residual_num_blocks(self):
        return misc_utils.resolve_pp_proxy_residual_num_blocks(
            model_config=None,
            pp_size=self.ps.pp_size,
            pp_rank=self.ps.pp_rank,
            start_layer=0,
        )

    def other(self):
        return 1
"""

#: One builder allocating inline (0.5.18), one passing the size on to a shared one.
BUFFERS = """\
from typing import Optional

import torch


def allocate(
    *,
    max_num_tokens: int,
    dtype: torch.dtype = torch.float32,
    pp_proxy_topk_size: Optional[int] = None,
    pp_proxy_residual_num_blocks: Optional[int] = None,
):
    pp_proxy_tensors = {"hidden_states": torch.zeros((max_num_tokens, 4))}
    if pp_proxy_topk_size is not None:
        pp_proxy_tensors["topk_indices"] = torch.zeros(
            (max_num_tokens, pp_proxy_topk_size), dtype=torch.int32
        )
    return pp_proxy_tensors


def create(
    *,
    rows: int,
    dtype: torch.dtype = torch.float32,
    pp_proxy_residual_num_blocks: Optional[int] = None,
):
    return allocate(
        max_num_tokens=rows,
        pp_proxy_residual_num_blocks=pp_proxy_residual_num_blocks,
    )
"""

DECODE = """\
class DecodeRunner:
    def build(self):
        return create(
            rows=8,
            pp_proxy_residual_num_blocks=(
                self.model_runner.get_pp_proxy_residual_num_blocks()
            ),
        )

    def load_batch(self, forward_batch, pp_proxy_tensors=None):
        if not forward_batch.needs_forward_metadata_init():
            # Pre-planned.
            self.buffers.input_ids[: self.raw_num_token].copy_(forward_batch.input_ids)
            self.buffers.positions[: self.raw_num_token].copy_(forward_batch.positions)
            return "pre-planned"
        return "full"
"""


def _exec(text: str) -> dict:
    namespace: dict = {"torch": torch}
    exec(compile(text, "module.py", "exec"), namespace)
    return namespace


class _Model:
    def get_pp_proxy_aux_hidden_size(self):
        return 12


@pytest.fixture
def glue(monkeypatch):
    """The shipped helpers, importable where the resolver imports them from."""
    module = types.ModuleType(GLUE_MODULE)
    monkeypatch.setitem(sys.modules, GLUE_MODULE, module)
    exec(compile(render_glue(), "aux_hidden_states.py", "exec"), module.__dict__)
    return module


def test_the_resolver_and_the_runner_method_follow_the_residual_bank(glue):
    misc = _exec(add_resolver(MISC, "misc_utils.py"))
    resolve = misc["resolve_pp_proxy_aux_hidden_size"]
    assert resolve(model=_Model(), pp_size=3, pp_rank=2) == 12
    assert resolve(model=_Model(), pp_size=3, pp_rank=0) == 0
    assert resolve(model=_Model(), pp_size=1, pp_rank=0) == 0
    assert resolve(model=torch.nn.Module(), pp_size=3, pp_rank=1) == 0
    # A model without a width method of its own: the relay its hook gave a stack.
    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.layers, model.model.start_layer, model.model.end_layer = [0] * 4, 2, 4
    model.model.layers_to_capture = [1, 3]
    group = types.SimpleNamespace(world_size=2, is_last_rank=True)
    glue.set_pp_aux_capture(model.model, group, hidden_size=6)
    assert resolve(model=model, pp_size=2, pp_rank=1) == 6
    text = add_resolver(MISC, "misc_utils.py")
    assert "from typing import Any, Optional, Protocol, runtime_checkable\n" in text
    assert f"from {GLUE_MODULE} import pp_aux_proxy_hidden_size\n" in text
    runner_text = add_runner_method(RUNNER, "model_runner.py")
    namespace = _exec(runner_text)
    runner = namespace["ModelRunner"]()
    runner.model = _Model()
    runner.ps = types.SimpleNamespace(pp_size=2, pp_rank=1)
    namespace["misc_utils"] = types.SimpleNamespace(**misc)
    assert runner.get_pp_proxy_aux_hidden_size() == 12
    assert runner.other() == 1
    assert runner_text.index("get_pp_proxy_aux_hidden_size") > runner_text.index(
        "get_pp_proxy_residual_num_blocks"
    )


def test_buffers_allocate_the_entry_inline_and_through_the_shared_allocation():
    sized = _exec(add_buffer_sizing(BUFFERS, "buffers.py"))
    tensors = sized["create"](rows=8, pp_proxy_aux_hidden_size=12)
    assert tensors["aux_hidden_states"].shape == (8, 12)
    assert tensors["aux_hidden_states"].dtype == torch.float32
    assert "aux_hidden_states" not in sized["create"](rows=8)
    inline = sized["allocate"](max_num_tokens=5, pp_proxy_topk_size=2, pp_proxy_aux_hidden_size=3)
    assert inline["aux_hidden_states"].shape == (5, 3)
    assert inline["topk_indices"].shape == (5, 2)
    assert "aux_hidden_states" not in _exec(BUFFERS)["create"](rows=8)


def test_runner_argument_and_pre_planned_refresh():
    text = add_pre_planned_refresh(add_runner_argument(DECODE, "decode.py", True), "decode.py")
    assert (
        "            pp_proxy_aux_hidden_size=self.model_runner.get_pp_proxy_aux_hidden_size(),\n"
        in text
    )
    namespace = _exec(text)
    passed = {}
    namespace["create"] = lambda **kwargs: passed.update(kwargs)
    runner = namespace["DecodeRunner"]()
    runner.model_runner = types.SimpleNamespace(
        get_pp_proxy_residual_num_blocks=lambda: None, get_pp_proxy_aux_hidden_size=lambda: 12
    )
    runner.build()
    assert passed["pp_proxy_aux_hidden_size"] == 12
    runner.buffers = types.SimpleNamespace(
        input_ids=torch.zeros(8),
        positions=torch.zeros(8),
        pp_proxy_tensors={
            "hidden_states": torch.zeros(8, 4),
            "aux_hidden_states": torch.zeros(8, 12),
        },
    )
    runner.raw_num_token = 3
    batch = types.SimpleNamespace(
        needs_forward_metadata_init=lambda: False, input_ids=torch.ones(3), positions=torch.ones(3)
    )
    aux, hidden = torch.randn(3, 12), torch.randn(3, 4)
    proxy = types.SimpleNamespace(
        tensors={"aux_hidden_states": aux, "hidden_states": hidden, "__msg_type__": None}
    )
    assert runner.load_batch(batch, proxy) == "pre-planned"
    assert torch.equal(runner.buffers.pp_proxy_tensors["aux_hidden_states"][:3], aux)
    assert torch.equal(runner.buffers.pp_proxy_tensors["hidden_states"][:3], hidden)
    # Unsized, the pre-planned branch leaves the proxy buffers as they were.
    runner.buffers.pp_proxy_tensors["aux_hidden_states"].zero_()
    plain = _exec(DECODE)["DecodeRunner"]()
    plain.buffers, plain.raw_num_token = runner.buffers, 3
    plain.load_batch(batch, proxy)
    assert not runner.buffers.pp_proxy_tensors["aux_hidden_states"].any()


def test_a_prefill_runner_without_the_argument_and_a_sized_file_are_left_alone():
    assert add_runner_argument("x = 1\n", "prefill.py", required=False) == "x = 1\n"
    once = add_pre_planned_refresh(DECODE, "decode.py")
    assert add_pre_planned_refresh(once, "decode.py") == once


@pytest.mark.parametrize(
    ("rewrite", "text", "message"),
    [
        (add_resolver, "x = 1\n", r"^misc\.py: expected one residual resolver, found 0"),
        (add_runner_method, "x = 1\n", r"^misc\.py: expected one get_pp_proxy_residual"),
        (
            add_buffer_sizing,
            BUFFERS.replace(
                "        pp_proxy_residual_num_blocks=pp_proxy_residual_num_blocks,\n", ""
            ),
            r"^misc\.py: 2 pp_proxy_residual_num_blocks parameters, 0 passed on, 1 topk",
        ),
        (
            lambda text, path: add_runner_argument(text, path, True),
            "x = 1\n",
            r"^misc\.py: no pp_proxy_residual_num_blocks= argument",
        ),
        (
            add_pre_planned_refresh,
            DECODE.replace("self.buffers.positions", "self.positions"),
            r"^misc\.py:\d+: pre-planned branch without positions copy",
        ),
    ],
)
def test_a_file_of_another_shape_is_an_error_naming_it(rewrite, text, message):
    with pytest.raises(SizingError, match=message):
        rewrite(text, "misc.py")
