"""``graph_sizing.py`` mirrors a DSPARK PP proxy sizing path for the aux entry, and
``family_proxy_width.py`` gives a rewritten causal-LM class its width method."""

from __future__ import annotations

import libcst as cst
import pytest

from codemods.upstream.family_proxy_width import add_proxy_width_method
from codemods.upstream.graph_sizing import SizingError, mirror_dspark_sizing

#: A small module in the shape of a sizing path: protocol, resolver, allocation with an
#: ``if`` block, a keyword argument spread over lines, and a method.
SIZING = '''\
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class _SupportsDSparkPPProxy(Protocol):
    def get_pp_proxy_dspark_hidden_size(self) -> int: ...


def resolve_pp_proxy_dspark_hidden_size(*, model: Any, pp_rank: int) -> int:
    if pp_rank == 0:
        return 0
    if isinstance(model, _SupportsDSparkPPProxy):
        return model.get_pp_proxy_dspark_hidden_size()
    return 0


def allocate(
    rows: int,
    pp_proxy_dspark_hidden_size: int = 0,
):
    tensors = {"hidden_states": torch.zeros(rows, 4)}
    if pp_proxy_dspark_hidden_size:
        tensors["dspark_hidden_states"] = torch.zeros(
            (rows, pp_proxy_dspark_hidden_size)
        )
    return tensors


class Runner:
    def get_pp_proxy_dspark_hidden_size(self) -> int:
        return resolve_pp_proxy_dspark_hidden_size(model=self.model, pp_rank=self.rank)

    def buffers(self):
        return allocate(
            8,
            pp_proxy_dspark_hidden_size=(
                self.get_pp_proxy_dspark_hidden_size()
            ),
        )
'''


class _Model:
    def get_pp_proxy_dspark_hidden_size(self):
        return 8

    def get_pp_proxy_aux_hidden_size(self):
        return 12


def _run(text: str, rank: int = 1):
    namespace: dict = {}
    exec(compile(text, "sizing.py", "exec"), namespace)
    runner = namespace["Runner"]()
    runner.model, runner.rank = _Model(), rank
    return namespace, runner


def test_every_unit_of_the_path_gets_an_aux_twin():
    mirrored = mirror_dspark_sizing(SIZING, "sizing.py")
    namespace, runner = _run(mirrored)
    tensors = runner.buffers()
    assert tensors["dspark_hidden_states"].shape == (8, 8)
    assert tensors["aux_hidden_states"].shape == (8, 12)
    assert runner.get_pp_proxy_aux_hidden_size() == 12
    assert namespace["resolve_pp_proxy_aux_hidden_size"](model=_Model(), pp_rank=0) == 0
    assert "_SupportsAuxPPProxy" in namespace
    _, first = _run(mirrored, rank=0)
    assert "aux_hidden_states" not in first.buffers()
    # The DSPARK lines are untouched: the original is the mirror minus the twins.
    kept = [line for line in mirrored.splitlines() if "aux" not in line.lower()]
    assert all(line in kept for line in SIZING.splitlines() if "dspark" in line.lower())


def test_mirroring_is_idempotent_and_refuses_a_file_without_the_path():
    once = mirror_dspark_sizing(SIZING, "sizing.py")
    assert mirror_dspark_sizing(once, "sizing.py") == once
    with pytest.raises(SizingError, match=r"^old\.py: no DSPARK PP proxy sizing"):
        mirror_dspark_sizing("def allocate(rows):\n    return {}\n", "old.py")
    with pytest.raises(SizingError, match=r"^new\.py:1: .*'allocate'"):
        mirror_dspark_sizing("def allocate(pp_proxy_dspark_hidden_size=0):\n    pass\n",
                             "new.py")


CLASS = '''\
class TinyForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass

    def set_dflash_layers_to_capture(self, layer_ids):
        pass

    # Loads weights.
    def load_weights(self, weights):
        pass
'''


def test_the_width_method_follows_the_last_capture_hook_once():
    (cls,) = cst.parse_module(CLASS).body
    updated = add_proxy_width_method(cls, "self.model")
    text = cst.Module(body=[updated]).code
    assert text == CLASS.replace(
        "    # Loads weights.",
        "    def get_pp_proxy_aux_hidden_size(self) -> int:\n"
        "        return pp_aux_proxy_hidden_size(self.model)\n\n"
        "    # Loads weights.",
    )
    assert add_proxy_width_method(updated, "self.model") is updated
