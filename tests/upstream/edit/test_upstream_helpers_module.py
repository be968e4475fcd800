"""The helpers go into SGLang's aux-capture module (``edit/runtime.py``): appended after
its own code with their imports merged into its import block, or the module created
holding them; a module that holds them already is left as it is."""

from __future__ import annotations

import sys
import types

import pytest

from codemods.upstream.edit.runtime import (
    SECTION_START,
    HelpersError,
    helpers_section,
    render_glue,
    with_helpers,
)

#: SGLang's module in the shape 0.5.20+ ship it (docstring, future import, TYPE_CHECKING).
MODULE = '''"""Aux hidden states captured for Eagle3/DFlash draft models."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Union

import torch

if TYPE_CHECKING:
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

AuxHiddenStates = Union[torch.Tensor, List[torch.Tensor]]


def pack_aux_hidden_states(aux_hidden_states: AuxHiddenStates) -> torch.Tensor:
    return torch.cat(aux_hidden_states, dim=-1)
'''


def test_the_helpers_follow_the_modules_own_code_with_one_import_block(monkeypatch):
    new = with_helpers(MODULE, "aux_hidden_states.py")
    head, _, tail = new.partition(SECTION_START)
    assert new.startswith('"""Aux hidden states captured for Eagle3/DFlash draft models."""\n')
    assert head.endswith("    return torch.cat(aux_hidden_states, dim=-1)\n\n\n")
    assert SECTION_START + tail == helpers_section()
    # The imports the helpers use are merged where isort puts them, none twice.
    assert (
        "from __future__ import annotations\n\n"
        "from dataclasses import dataclass\n"
        "from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union\n\n"
        "import torch\n\n"
        "if TYPE_CHECKING:\n"
    ) in new
    assert new.count("import torch\n") == 1 and new.count("from typing import") == 1
    module = types.ModuleType("auxcap_test_aux_hidden_states")
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look it up
    exec(compile(new, "aux_hidden_states.py", "exec"), module.__dict__)
    assert callable(module.set_pp_aux_capture) and callable(module.pack_aux_hidden_states)


def test_a_module_holding_the_helpers_is_kept_and_another_version_is_replaced():
    once = with_helpers(MODULE, "aux_hidden_states.py")
    assert with_helpers(once, "aux_hidden_states.py") == once
    older = once.replace("def pp_aux_outgoing(", "def pp_aux_outgoing_v0(")
    assert with_helpers(older, "aux_hidden_states.py") == once


def test_a_release_without_the_module_gets_it_created_with_the_helpers():
    assert with_helpers(None) == render_glue()
    assert render_glue().endswith(helpers_section())
    assert with_helpers(render_glue()) == render_glue()


def test_a_module_that_does_not_import_torch_is_refused_by_name():
    with pytest.raises(HelpersError, match=r"^x\.py: does not import torch"):
        with_helpers('"""Doc."""\n\nX = 1\n', "x.py")
