"""``graph_sizing.py`` renames a DSPARK PP proxy sizing path for every capture method, and
``family_proxy_width.py`` gives a rewritten causal-LM class its width method."""

from __future__ import annotations

import libcst as cst
import pytest

from codemods.upstream.family.proxy_width import add_proxy_width_method
from codemods.upstream.sizing.graph_sizing import SizingError, rename_dspark_entry

#: A small module in the shape of a sizing path: protocol, resolver, allocation with an
#: ``if`` block, a keyword argument spread over lines, and a method.
SIZING = """\
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
"""


class _Model:
    def get_pp_proxy_aux_hidden_size(self):
        return 12


def _run(text: str, rank: int = 1):
    namespace: dict = {}
    exec(compile(text, "sizing.py", "exec"), namespace)
    runner = namespace["Runner"]()
    runner.model, runner.rank = _Model(), rank
    return namespace, runner


def test_the_path_is_renamed_for_every_capture_method():
    renamed = rename_dspark_entry(SIZING, "sizing.py")
    assert "dspark" not in renamed.lower()
    namespace, runner = _run(renamed)
    assert runner.buffers()["aux_hidden_states"].shape == (8, 12)
    assert runner.get_pp_proxy_aux_hidden_size() == 12
    assert namespace["resolve_pp_proxy_aux_hidden_size"](model=_Model(), pp_rank=0) == 0
    assert "_SupportsAuxPPProxy" in namespace
    _, first = _run(renamed, rank=0)
    assert "aux_hidden_states" not in first.buffers()
    # Lines the shorter names let fit are joined as black joins them; the rest stays.
    assert (
        "        return resolve_pp_proxy_aux_hidden_size(model=self.model, "
        "pp_rank=self.rank)\n" in renamed
    )
    assert "            pp_proxy_aux_hidden_size=self.get_pp_proxy_aux_hidden_size(),\n" in renamed
    joined = (
        '        tensors["aux_hidden_states"] = torch.zeros((rows, pp_proxy_aux_hidden_size))\n'
    )
    assert joined in renamed
    assert len(renamed.splitlines()) == len(SIZING.splitlines()) - 4


def test_renaming_is_idempotent_and_a_line_that_would_not_fit_stays_split():
    once = rename_dspark_entry(SIZING, "sizing.py")
    assert rename_dspark_entry(once, "sizing.py") == once
    wide = (
        "def f():\n    return g(\n        pp_proxy_dspark_hidden_size_with_a_very_long_"
        "name_that_does_not_fit_on_one_line_at_all\n    )\n"
    )
    assert rename_dspark_entry(wide, "wide.py").count("\n") == 4
    # A magic trailing comma keeps the call split, as black keeps it.
    trailing = "x = f(\n    pp_proxy_dspark_hidden_size=1,\n)\n"
    assert rename_dspark_entry(trailing, "t.py") == "x = f(\n    pp_proxy_aux_hidden_size=1,\n)\n"
    with pytest.raises(SizingError, match=r"^bad\.py: renamed sizing does not compile"):
        rename_dspark_entry("def f(:\n    pp_proxy_dspark_hidden_size\n", "bad.py")


CLASS = """\
class TinyForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass

    def set_dflash_layers_to_capture(self, layer_ids):
        pass

    # Loads weights.
    def load_weights(self, weights):
        pass
"""


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
