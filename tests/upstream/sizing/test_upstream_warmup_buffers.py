"""``warmup_buffers.py`` gives the runner's dummy-forward buffers (``_allocate_decode_buffers``
/ ``_alloc_dummy_decode_buffers`` in ``runner/base_runner.py``) the aux entry.

On a small module in ``base_runner.py``'s shape the result is executed: the allocation
holds ``aux_hidden_states`` with the width the getter gives and the rows of
``topk_indices``, and none when the width is 0; the dummy buffers ask the getter.  On the
real releases 0.5.17-0.5.23 the whole patch changes ``base_runner.py`` by exactly these
three insertions, and the series puts it where the getter already exists (the runtime
patch before 0.5.21, the rename patch from 0.5.21); 0.5.16, whose sizing is left out,
keeps its file.
"""

from __future__ import annotations

import difflib
import types

import pytest
import torch

from codemods.upstream.edit.change_kinds import RENAME_ROLES, RUNTIME, Role
from codemods.upstream.generate import generate
from codemods.upstream.output.series import build_series
from codemods.upstream.output.series_messages import RENAME
from codemods.upstream.sizing.graph_sizing import SizingError
from codemods.upstream.sizing.warmup_buffers import has_dummy_buffers, size_dummy_buffers

BASE_RUNNER = """\
from types import SimpleNamespace
from typing import Optional

import torch


def _allocate_decode_buffers(
    *,
    max_bs: int,
    max_num_token: int,
    hidden_size: int,
    dtype: torch.dtype,
    pp_size: int,
    pp_proxy_topk_size: Optional[int] = None,
    pp_proxy_residual_num_blocks: Optional[int] = None,
    allocate_logits_buffer: bool = True,
) -> SimpleNamespace:
    if True:
        if pp_size > 1:
            pp_proxy_tensors = {
                "hidden_states": torch.zeros((max_num_token, hidden_size), dtype=dtype),
            }
            if pp_proxy_topk_size is not None:
                pp_proxy_tensors["topk_indices"] = torch.zeros(
                    (max_num_token, pp_proxy_topk_size), dtype=torch.int32
                )
        else:
            pp_proxy_tensors = None
    return SimpleNamespace(pp_proxy_tensors=pp_proxy_tensors)


class BaseRunner:
    def _alloc_dummy_decode_buffers(self, max_bs: int, *, num_tokens_per_req: int = 1):
        mr = self.model_runner
        return _allocate_decode_buffers(
            max_bs=max_bs,
            max_num_token=max_bs * num_tokens_per_req,
            hidden_size=mr.hidden_size,
            dtype=torch.float32,
            pp_size=mr.pp_size,
            pp_proxy_topk_size=mr.get_pp_proxy_topk_size(),
            pp_proxy_residual_num_blocks=mr.get_pp_proxy_residual_num_blocks(),
        )
"""
PATH = "sglang/srt/model_executor/runner/base_runner.py"


def _load(text: str) -> types.ModuleType:
    module = types.ModuleType("base_runner_shape")
    exec(compile(text, PATH, "exec"), module.__dict__)
    return module


def _dummy(module, width: int, pp_size: int = 2, topk=None):
    runner = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(
            hidden_size=6,
            pp_size=pp_size,
            get_pp_proxy_topk_size=lambda: topk,
            get_pp_proxy_residual_num_blocks=lambda: None,
            get_pp_proxy_aux_hidden_size=lambda: width,
        )
    )
    return module.BaseRunner._alloc_dummy_decode_buffers(runner, 4, num_tokens_per_req=3)


def test_the_dummy_buffers_hold_the_entry_the_getter_sizes():
    assert has_dummy_buffers(BASE_RUNNER)
    sized = _load(size_dummy_buffers(BASE_RUNNER, PATH))
    proxy = _dummy(sized, width=12, topk=5).pp_proxy_tensors
    assert proxy["aux_hidden_states"].shape == (12, 12)
    assert proxy["aux_hidden_states"].dtype == torch.float32
    assert proxy["topk_indices"].shape[0] == proxy["aux_hidden_states"].shape[0]
    # A stage that receives nothing (the first, or no captures before it): no entry.
    assert "aux_hidden_states" not in _dummy(sized, width=0).pp_proxy_tensors
    assert _dummy(sized, width=12, pp_size=1).pp_proxy_tensors is None
    # The released shape has none, whatever the getter says.
    assert "aux_hidden_states" not in _dummy(_load(BASE_RUNNER), width=12).pp_proxy_tensors


def test_the_rewrite_is_idempotent_and_refuses_another_shape():
    sized = size_dummy_buffers(BASE_RUNNER, PATH)
    assert size_dummy_buffers(sized, PATH) == sized
    without_argument = BASE_RUNNER.replace(
        "            pp_proxy_residual_num_blocks=mr.get_pp_proxy_residual_num_blocks(),\n", ""
    )
    assert not has_dummy_buffers(without_argument)
    with pytest.raises(SizingError, match="no pp_proxy_residual_num_blocks= argument"):
        size_dummy_buffers(without_argument, PATH)
    without_topk = BASE_RUNNER.replace("if pp_proxy_topk_size is not None:", "if False:")
    assert not has_dummy_buffers(without_topk)
    with pytest.raises(SizingError, match="no single topk_indices allocation"):
        size_dummy_buffers(without_topk, PATH)


#: What the patch inserts into base_runner.py, in order.
INSERTED = [
    "pp_proxy_aux_hidden_size: int = 0,",
    "if pp_proxy_aux_hidden_size:",
    'pp_proxy_tensors["aux_hidden_states"] = torch.zeros(',
    "(max_num_token, pp_proxy_aux_hidden_size), dtype=dtype",
    ")",
    "pp_proxy_aux_hidden_size=mr.get_pp_proxy_aux_hidden_size(),",
]
#: 0.5.21+: keyed by the entry the model sends (``dspark_alias.py``).
INSERTED_KEYED = [
    "pp_proxy_aux_hidden_size: int = 0,",
    'pp_proxy_aux_entry: str = "aux_hidden_states",',
    "if pp_proxy_aux_hidden_size:",
    "pp_proxy_tensors[pp_proxy_aux_entry] = torch.zeros(",
    "(max_num_token, pp_proxy_aux_hidden_size), dtype=dtype",
    ")",
    "pp_proxy_aux_hidden_size=mr.get_pp_proxy_aux_hidden_size(),",
    "pp_proxy_aux_entry=mr.get_pp_proxy_aux_entry(),",
]


@pytest.mark.sglang
@pytest.mark.parametrize(
    "version", ["0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]
)
def test_each_release_sizes_its_dummy_buffers_where_the_getter_exists(version, sglang_release):
    result = generate(sglang_release(version), models=["llama"])
    (change,) = [c for c in result.changes if c.path.endswith("/runner/base_runner.py")]
    assert (change.group, change.role) == (RUNTIME, Role.WARMUP_SIZING)
    assert change.old is not None
    added = [
        line[1:].strip()
        for line in difflib.unified_diff(change.old.splitlines(), change.new.splitlines())
        if line.startswith("+") and not line.startswith("+++")
    ]
    removed = [
        line
        for line in difflib.unified_diff(change.old.splitlines(), change.new.splitlines())
        if line.startswith("-") and not line.startswith("---")
    ]
    keyed = version >= "0.5.21"
    assert sorted(added) == sorted(INSERTED_KEYED if keyed else INSERTED) and removed == []
    # The getter the buffers ask comes from the same patch of the series or an earlier one.
    patches = build_series(result)
    home = next(i for i, p in enumerate(patches) if change.path in p.paths)
    renamed = any(c.role in RENAME_ROLES for c in result.changes if c.changed)
    assert patches[home].key == (RENAME if renamed else RUNTIME)
    assert renamed is (version >= "0.5.21")
    getter = [
        i
        for i, p in enumerate(patches)
        for c in p.changes
        if c.path.endswith("/model_runner.py")
        and "def get_pp_proxy_aux_hidden_size" in c.new
        and (not keyed or "def get_pp_proxy_aux_entry" in c.new)
    ]
    assert getter and getter[0] <= home


@pytest.mark.sglang
def test_a_release_whose_sizing_is_left_out_keeps_its_dummy_buffers(sglang_release):
    result = generate(sglang_release("0.5.16"), models=["llama"])
    assert not [c for c in result.changes if c.path.endswith("base_runner.py") and c.changed]
