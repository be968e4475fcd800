"""The runtime guard on SGLang 0.5.14 (the release SpecForge pins), driven on CPU.

0.5.14 refuses speculative decoding with PP in ``check_server_args``, so its validation is
left as is and says where it refuses; the capture is still reachable by driving
``ModelRunner`` directly (offline capture, as SpecForge does).  The patch for llama puts
the check before both hook calls of ``ModelRunner.init_aux_hidden_state_capture``; the
patched runner (imported from the patched copy of the real wheel) configures the capture
of the patched ``LlamaForCausalLM`` under PP and refuses, naming class and method, a model
whose file the patch leaves alone (``Qwen2ForCausalLM``) and a subclass of the patched class
with its own stack; with one stage it refuses nothing.  The unpatched release configures
all of them under PP without a word.  The texts name the file and function, and the
patched copy regenerates to nothing.  The runtime-guard test of the shipped
``test_pp_aux_relay.py``, in the form 0.5.14 gets (``ModelRunner``'s method), passes on the
patched copy and fails on the release.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from sglang_support import warm
from sglang_support.env import run_python, sglang_tree
from sglang_support.family_check import patched_copy, shipped_test_env

from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.generate import generate
from codemods.upstream.output.branch_message import commit_message
from codemods.upstream.output.pr_body import render
from codemods.upstream.output.series import build_series
from codemods.upstream.part import Verdict
from codemods.upstream.validation.runtime_guard import relay_test

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

VERSION = "0.5.14"
DRIVE = Path(__file__).with_name("guard_drive.py")
RUNNER = "sglang/srt/model_executor/model_runner.py"
FUNCTION = "ModelRunner.init_aux_hidden_state_capture"


def _drive(root: Path) -> dict:
    proc = run_python([str(DRIVE)], root, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    return patched_copy(sglang_tree(VERSION), tmp_path_factory.mktemp("guard"), ["llama"])


def test_the_patched_runner_refuses_a_model_that_does_not_relay(patched):
    result, copy = patched
    guard = result.decision("runtime guard")
    assert guard.verdict is Verdict.APPLIES
    (change,) = [c for c in result.changes if c.role is Role.RUNTIME_GUARD]
    assert change.path == RUNNER
    assert [(s.function, s.method) for s in guard.facts.sites] == [
        (FUNCTION, "EAGLE3"),
        (FUNCTION, "DFLASH"),
    ]
    out = _drive(copy)
    assert out["declared"] == ["EAGLE3", "DFLASH"]
    for method in ("EAGLE3", "DFLASH"):
        assert out[f"LlamaForCausalLM/{method}/pp2"] == "configured"
        assert out[f"LlamaForCausalLM/{method}/pp1"] == "configured"
        assert out[f"OwnStack/{method}/pp1"] == "configured"
        assert out[f"OwnStack/{method}/pp2"].startswith(
            f"raised: OwnStack's decoder stack does not relay {method}'s aux hidden states"
        )
    assert out["Qwen2ForCausalLM/EAGLE3/pp1"] == "configured"
    refused = out["Qwen2ForCausalLM/EAGLE3/pp2"]
    assert refused.startswith("raised: Qwen2ForCausalLM's decoder stack does not relay EAGLE3's"), (
        refused
    )
    assert "pp_size=2 would lose the captures" in refused


def test_the_release_configures_every_model_under_pp_silently():
    out = _drive(sglang_tree(VERSION))
    assert out["declared"] == []
    assert out["Qwen2ForCausalLM/EAGLE3/pp2"] == "configured"
    assert out["OwnStack/DFLASH/pp2"] == "configured"


def test_validation_names_the_refusal_and_the_texts_name_the_guard(patched):
    result, copy = patched
    validation = result.decision("validation")
    assert validation.verdict is Verdict.NOT_APPLICABLE
    assert validation.reason.startswith("sglang/srt/server_args.py:")
    assert "check_server_args refuses every speculative algorithm with PP" in validation.reason
    assert "attention_backend_setup" not in result.patch
    assert "configure_aux_hidden_state_capture" not in render(result)
    assert f"`{RUNNER}` (`{FUNCTION}`)" in render(result)
    message = " ".join(commit_message(result).split())
    assert f"model_executor/model_runner.py ({FUNCTION})" in message
    last = build_series(result)[-1]
    assert last.subject == "[PP] Refuse aux capture under PP for models that do not relay it"
    assert RUNNER in last.paths
    assert f"model_runner.py ({FUNCTION})" in " ".join(last.body.split())
    assert max(len(line) for line in [last.subject, *last.body.splitlines()]) <= 72
    again = generate(copy, models=["llama"])
    assert again.decision("runtime guard").verdict is Verdict.APPLIES
    assert not [c for c in again.changes if c.changed], [c.path for c in again.changes]


def _guard_test_module(text: str) -> str:
    """The runtime-guard test of a rendered ``test_pp_aux_relay.py`` (the part after the
    relay and opt-in tests, which need 0.5.21+), as a module of its own."""
    tree = ast.parse(text)
    wanted = {"HOOKS", "GUARDED", "_configure_capture", "TestRuntimeGuard"}
    kept = [
        ast.get_source_segment(text, node)
        for node in tree.body
        if getattr(node, "name", None) in wanted
        or (isinstance(node, ast.Assign) and node.targets[0].id in wanted)  # type: ignore[attr-defined]
    ]
    head = (
        "import re\n"
        "import unittest\n"
        "from types import SimpleNamespace\n"
        "from unittest import mock\n\n"
        "from torch import nn\n\n"
        "from sglang.test.test_utils import CustomTestCase\n\n"
    )
    return (
        head
        + "\n\n".join(k for k in kept if k)
        + '\n\nif __name__ == "__main__":\n    unittest.main()\n'
    )


def _run_guard_test(root: Path, text: str, folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_guard_variant.py").write_text(_guard_test_module(text))
    return warm.run(
        ["-m", "unittest", "-v", "test_guard_variant"],
        env=shipped_test_env(root),
        cwd=folder,
        timeout=600,
    )


def test_the_shipped_guard_test_in_0_5_14s_form_passes_on_the_patch_only(patched, tmp_path):
    result, copy = patched
    (text,) = relay_test(result.tree).values()
    assert "# @@" not in text
    assert "ModelRunner.init_aux_hidden_state_capture(runner)" in text
    assert (
        "attention_backend_setup"
        not in text.split("class TestRuntimeGuard")[0].split("def _configure_capture")[1]
    )
    assert 'GUARDED = ("EAGLE3", "DFLASH")\n' in text
    passed = _run_guard_test(copy, text, tmp_path / "patched")
    assert passed.returncode == 0, passed.stderr[-3000:]
    assert "Ran 2 tests" in passed.stderr and passed.stderr.rstrip().endswith("OK")
    failed = _run_guard_test(sglang_tree(VERSION), text, tmp_path / "release")
    assert failed.returncode != 0
    assert "NotImplementedError not raised" in failed.stderr, failed.stderr[-3000:]
