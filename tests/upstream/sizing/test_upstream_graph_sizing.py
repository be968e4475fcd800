"""``graph_sizing.py`` renames a DSPARK PP proxy sizing path for every capture method, and
its resolver asks a model's own width method, the old DSPARK one (deprecated), then the
shipped helpers' one lookup."""

from __future__ import annotations

import logging
import sys
import types
from types import SimpleNamespace

import pytest
import torch

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.runtime import render_glue
from codemods.upstream.sizing import dspark_alias
from codemods.upstream.sizing.dspark_alias import keep_dspark_contract
from codemods.upstream.sizing.graph_sizing import (
    SizingError,
    rename_dspark_entry,
    resolve_through_helpers,
)

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


#: SGLang 0.5.21+'s resolver, as its ``misc_utils.py`` has it.
RESOLVER = """\
import logging
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger("misc_utils")


@runtime_checkable
class _SupportsDSparkPPProxy(Protocol):
    def get_pp_proxy_dspark_hidden_size(self) -> int: ...


def resolve_pp_proxy_dspark_hidden_size(
    *, model: Any, pp_size: int, pp_rank: int
) -> int:
    if pp_size <= 1 or pp_rank == 0:
        return 0
    if isinstance(model, _SupportsDSparkPPProxy):
        return model.get_pp_proxy_dspark_hidden_size()
    return 0
"""


@pytest.fixture
def resolve(monkeypatch):
    """The rewritten resolver, importing the shipped helpers."""
    glue = types.ModuleType(GLUE_MODULE)
    monkeypatch.setitem(sys.modules, GLUE_MODULE, glue)
    exec(compile(render_glue(), "aux_hidden_states.py", "exec"), glue.__dict__)
    text = resolve_through_helpers(rename_dspark_entry(RESOLVER, "m.py"), "m.py")
    assert f"from {GLUE_MODULE} import pp_aux_proxy_hidden_size\n" in text
    namespace: dict = {}
    exec(compile(text, "misc_utils.py", "exec"), namespace)
    return glue, namespace["resolve_pp_proxy_aux_hidden_size"]


def test_the_resolver_sizes_from_the_relay_a_hook_gave_any_stack_of_the_model(resolve):
    glue, resolver = resolve
    model = torch.nn.Module()
    model.language_model = torch.nn.Module()
    stack = model.language_model.model = torch.nn.Module()
    stack.layers, stack.start_layer, stack.end_layer = [None] * 4, 2, 4
    stack.layers_to_capture = [0, 1, 3]
    group = SimpleNamespace(world_size=2, is_last_rank=True)
    glue.set_pp_aux_capture(stack, group, hidden_size=8)
    assert resolver(model=model, pp_size=2, pp_rank=1) == 16
    assert resolver(model=model, pp_size=2, pp_rank=0) == 0
    assert resolver(model=torch.nn.Module(), pp_size=2, pp_rank=1) == 0


def test_a_models_own_width_method_comes_first_and_the_old_one_warns(resolve, caplog):
    _, resolver = resolve

    class Own(torch.nn.Module):
        def get_pp_proxy_aux_hidden_size(self):
            return 7

    class Old(torch.nn.Module):
        def get_pp_proxy_dspark_hidden_size(self):
            return 5

    assert resolver(model=Own(), pp_size=2, pp_rank=1) == 7
    with caplog.at_level(logging.WARNING, logger="misc_utils"):
        assert resolver(model=Old(), pp_size=3, pp_rank=2) == 5
    assert "get_pp_proxy_dspark_hidden_size is deprecated" in caplog.text
    with pytest.raises(SizingError, match="resolver not found once"):
        resolve_through_helpers(RESOLVER, "m.py")


def test_the_release_contract_keeps_its_entry_and_the_old_resolver_name(monkeypatch, caplog):
    glue = types.ModuleType(GLUE_MODULE)
    monkeypatch.setitem(sys.modules, GLUE_MODULE, glue)
    exec(compile(render_glue(), "aux_hidden_states.py", "exec"), glue.__dict__)
    resolved = resolve_through_helpers(rename_dspark_entry(RESOLVER, "m.py"), "m.py")
    text = keep_dspark_contract(resolved, dspark_alias.MISC, "m.py")
    namespace: dict = {}
    exec(compile(text, "misc_utils.py", "exec"), namespace)

    class Old(torch.nn.Module):
        def get_pp_proxy_dspark_hidden_size(self):
            return 5

    class Both(Old):
        def get_pp_proxy_aux_hidden_size(self):
            return 7

    entry = namespace["resolve_pp_proxy_aux_entry"]
    assert entry(Old()) == "dspark_hidden_states"
    assert entry(Both()) == entry(torch.nn.Module()) == "aux_hidden_states"
    with caplog.at_level(logging.WARNING, logger="misc_utils"):
        assert (
            namespace["resolve_pp_proxy_dspark_hidden_size"](model=Both(), pp_size=2, pp_rank=1)
            == 7
        )
    assert "resolve_pp_proxy_dspark_hidden_size is deprecated" in caplog.text
    # The shipped check admits the release's contract for DSPARK only.
    assert glue.relays_pp_aux_capture(Old, "DSPARK")
    assert not glue.relays_pp_aux_capture(Old, "EAGLE3")
    assert not glue.relays_pp_aux_capture(torch.nn.Module, "DSPARK")
    with pytest.raises(SizingError, match="expected 1 of"):
        keep_dspark_contract(RESOLVER, dspark_alias.MISC, "m.py")
