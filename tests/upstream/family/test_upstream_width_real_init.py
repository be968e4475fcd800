"""The aux entry's width on patched causal LMs built through their real ``__init__``.

The width the CUDA-graph runners size the ``aux_hidden_states`` buffer of the PP handoff
with comes from ``misc_utils.resolve_pp_proxy_aux_hidden_size``, which asks the helpers'
one lookup (``pp_aux_proxy_hidden_size(model)``) for the relay the capture hook set up,
each capture as wide as the hook says (``hidden_size=``, from the config the class builds
its stack from).  Here every model class whose hooks the patch of SGLang 0.5.23 rewrites
(those that declare ``pp_aux_relay_methods``) is built by its real constructor with a tiny
config (4 layers, hidden size 64) as stage 0 and stage 1 of 2 gloo processes on the
patched tree (the shipped init test's ranks, ``sglang_support/width_check.py``), its
capture hook takes one capture on each stage, and the stage-1 model must be sized to the width of the entry stage 0 really
hands over (64 x its captures, which stage 1 then collects with its own) while stage 0
is sized 0.  ``GptOssModel``, ``MiniMaxM3Model``, ``MiniMaxM2Model`` and
``Glm4MoeLiteModel`` keep no ``config``; VL models build their stack from a part of theirs.
"""

from __future__ import annotations

import ast
import json

import pytest
from sglang_support.env import run_python
from sglang_support.family_check import patched_copy
from sglang_support.width_check import HIDDEN, MODELS

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
#: The stacks the reviewer found sized 0 (no ``config`` on the stack), and llama.
REQUIRED = {"gpt_oss", "minimax_m3", "minimax_m3_vl", "llama"}


@pytest.fixture(scope="module")
def copy(sglang_release, tmp_path_factory):
    _, tree = patched_copy(sglang_release(RELEASE), tmp_path_factory.mktemp("width"))
    return tree


@pytest.fixture(scope="module")
def report(copy):
    proc = run_python(["-m", "sglang_support.width_check", "--timeout", "240"], copy, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1])


#: The shipped helpers a decoder stack's rewritten forward relays through.
_RELAY_HELPERS = ("pp_aux_handoff", "pp_aux_outgoing", "pp_aux_seed", "pp_aux_collect")


def _relaying_forward(node: ast.ClassDef) -> bool:
    """``node`` defines a method that calls a relay helper (its ``forward``, or the method
    its ``forward`` hands the work to): a decoder stack."""
    return any(
        isinstance(item, ast.FunctionDef)
        and any(
            isinstance(call, ast.Call) and getattr(call.func, "id", None) in _RELAY_HELPERS
            for call in ast.walk(item)
        )
        for item in node.body
    )


def _sized_classes(tree) -> set[tuple[str, str]]:
    """``(module, class)`` of every model class whose hooks the patch rewrote: those that
    declare the capture methods they relay in their own body, other than the decoder
    stacks whose forward relays (they declare too)."""
    found = set()
    for path in sorted((tree / "sglang/srt/models").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "pp_aux_relay_methods = (" not in text:
            continue
        for node in ast.parse(text).body:
            if (
                isinstance(node, ast.ClassDef)
                and any(
                    isinstance(item, ast.Assign)
                    and any(getattr(t, "id", None) == "pp_aux_relay_methods" for t in item.targets)
                    for item in node.body
                )
                and not _relaying_forward(node)
            ):
                found.add((path.stem, node.name))
    return found


def test_the_check_builds_every_class_the_patch_sizes(copy):
    assert REQUIRED <= set(MODELS)
    built = {(module, cls) for module, cls, _, _ in MODELS.values()}
    # Kimi-Linear and Kimi-K3 (SGLang's own DSPARK relay, moved onto the helpers) are
    # built by their own checks (sglang_support/stage_check.py).
    sized = {(module, cls) for module, cls in _sized_classes(copy) if not module.startswith("kimi")}
    assert built == sized
    # No class of the patch sizes the entry itself: one lookup serves them all.
    for path in (copy / "sglang/srt/models").glob("*.py"):
        assert "get_pp_proxy_aux_hidden_size" not in path.read_text(encoding="utf-8"), path


def test_the_shipped_init_parallel_builds_the_pp_group_without_pynccl(report):
    # Off a GPU a CUDA build of torch would set up PyNccl for the PP group and fail;
    # the stages talk over gloo only.  Unpatched, the release's default sets it up.
    assert report["errors"] == []
    assert report["pp_pynccl"] == [False, False]


@pytest.mark.timeout(600)
def test_every_model_reports_the_width_its_previous_stage_sends(report):
    assert report["errors"] == []
    by_stage = {(r["model"], r["rank"]): r for r in report["records"]}
    assert set(by_stage) == {(name, rank) for name in MODELS for rank in (0, 1)}
    failures = {
        key: record["error"][-1500:] for key, record in by_stage.items() if record.get("error")
    }
    assert failures == {}
    widths = {}
    for name in MODELS:
        first, last = by_stage[(name, 0)], by_stage[(name, 1)]
        assert first["earlier"] == [] and first["resolved"] == 0, first
        assert len(last["earlier"]) == 1 == last["received"], last
        assert len(first["ids"]) == 1 and len(last["ids"]) == 1, (first, last)
        # What stage 0 really handed over, and all captures collected in layer order.
        assert last["sent"] == HIDDEN * len(last["earlier"]), last
        taken = first["ids"] + last["ids"]
        assert taken == sorted(taken), (first, last)
        assert last["collected"] == [i + 1.0 for i in taken], last
        widths[name] = (last["resolved"], last["sent"])
    assert {name: got for name, (got, _) in widths.items()} == {
        name: want for name, (_, want) in widths.items()
    }
