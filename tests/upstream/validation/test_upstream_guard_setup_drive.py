"""The runtime guard on SGLang 0.5.23, where ``configure_aux_hidden_state_capture`` (a
module-level function of ``attention_backend_setup.py``) calls the capture hooks, driven
on CPU.

The patch gives the function a keyword-only ``pp_size: int = 1``, which ``ModelRunner``
passes (``self.pp_group.world_size``).  Called as SGLang's own code calls it (the
keywords of the release's ``ModelRunner`` call, no ``pp_size``) with no PP group
initialised, the patched function configures the capture of a model class that relays
nothing, as the release does; with ``pp_size=2`` it raises ``NotImplementedError``
naming that class and the method, and configures the patched ``LlamaForCausalLM``, which
relays it.  The release itself configures everything, and has no ``pp_size``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.part import Verdict

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

VERSION = "0.5.23"
DRIVE = Path(__file__).with_name("setup_guard_drive.py")
RUNNER = "sglang/srt/model_executor/model_runner.py"
SETUP = "configure_aux_hidden_state_capture"


def _runner_keywords(root: Path) -> list[str]:
    """The keyword names of the release's own call of the function (``ModelRunner``)."""
    tree = ast.parse((root / RUNNER).read_text(encoding="utf-8"))
    (call,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == SETUP
    ]
    assert not call.args
    return [k.arg for k in call.keywords if k.arg is not None]


def _drive(root: Path, names: list[str]) -> dict:
    proc = run_python([str(DRIVE), json.dumps(names)], root, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    return patched_copy(sglang_tree(VERSION), tmp_path_factory.mktemp("setup"), ["llama"])


def test_one_stage_as_sglang_calls_it_and_two_stages_as_the_runner_passes_them(patched):
    result, copy = patched
    assert result.decision("runtime guard").verdict is Verdict.APPLIES
    names = _runner_keywords(sglang_tree(VERSION))
    assert "pp_size" not in names and "model" in names
    # The patched runner passes what the release's passes, and its PP size.
    assert _runner_keywords(copy) == [*names, "pp_size"]
    out = _drive(copy, names)
    assert out["pp_group"] is False
    assert set(out["declared"]) >= {"EAGLE3", "DFLASH"}
    for method in ("EAGLE3", "DFLASH"):
        # SGLang's own call (no pp_size, no PP group): nothing is asked of any class.
        assert out[f"Silent/{method}/as-sglang"] == "configured"
        assert out[f"LlamaForCausalLM/{method}/as-sglang"] == "configured"
        assert out[f"Silent/{method}/1"] == "configured"
        assert out[f"LlamaForCausalLM/{method}/1"] == "configured"
        assert out[f"LlamaForCausalLM/{method}/2"] == "configured"
        refused = out[f"Silent/{method}/2"]
        assert refused.startswith(
            f"raised NotImplementedError: Silent's decoder stack does not relay {method}'s "
            "aux hidden states"
        ), refused
        assert "pp_size=2 would lose the captures" in refused


def test_the_release_configures_every_model_and_takes_no_pp_size():
    release = sglang_tree(VERSION)
    out = _drive(release, _runner_keywords(release))
    assert out["pp_group"] is False and out["declared"] == []
    assert out["Silent/EAGLE3/as-sglang"] == "configured"
    assert out["Silent/EAGLE3/2"].startswith("raised TypeError:"), out["Silent/EAGLE3/2"]
