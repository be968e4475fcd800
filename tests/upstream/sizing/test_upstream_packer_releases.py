"""The family patch for the decoder stacks that pack their captures (deepseek_v2's and
mimo_v2's ``AuxHiddenStatePacker``, handed to the layers whose id is a capture id) on the
real SGLang 0.5.21, 0.5.22 and 0.5.23 releases.

The patch passes ``git apply --check`` on the release, applies to a copy and is empty on
the patched copy.  The real causal-LM and decoder-stack classes of the patched copy
(``DeepseekV2ForCausalLM`` / ``DeepseekV2Model``, ``MiMoV2ForCausalLM`` / ``MiMoV2Model``),
imported on CPU, run as 2 and 3 pipeline stages in separate processes (gloo,
``sglang_support.stage_check``; microbatches of 3, 0 and 2 tokens; captures on every stage, all
on stage 0, EAGLE3's default layers, and for mimo_v2 with the last stage's own output
among the captures): the last stage
hands the logits processor exactly the packed ``[tokens, K * hidden]`` tensor a PP=1 run
hands it (same type, shape, ``torch.equal`` values).  Aux entries missing from the handoff
make the last stage raise, naming the layers.  The same drive of the release's own model
files fails: the packer raises "captured 1 of 3", the last stage unpacks a bare
tensor, or (mimo_v2) a non-last stage unpacks its ``PPProxyTensors``.
"""

from __future__ import annotations

import subprocess

import pytest
from sglang_support.env import run_check
from sglang_support.family_check import patched_copy, unpatched_copy

from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
MODELS = ("deepseek_v2", "mimo_v2")
#: mimo_v2 has only a DFLASH hook; its last stage also captures its own output (capture
#: id ``num_hidden_layers``, taken before the PP handoff).
DFLASH_ONLY = {"mimo_v2"}
OUTPUT_CAPTURE = {"mimo_v2"}
#: 9 layers: PP=2 owns [0, 4) [4, 9), PP=3 owns [0, 3) [3, 6) [6, 9).
NUM_LAYERS = 9
TOKENS = [3, 0, 2]
#: Hook ids.  EAGLE3 keeps them as capture ids (0, 4, 7: one per stage of PP=3), DFLASH
#: captures before layer id + 1 (1, 5, 8); all on stage 0: capture ids 1, 2 (EAGLE3
#: shifts ids starting at 1 by one) or 2, 1; ``None``: EAGLE3's default layers 2, 4, 6.
EVERY_STAGE = [7, 0, 4]
ON_STAGE_0 = [1, 0]
#: DFLASH with the stage output: capture ids 9 (the output), 1, 5; and 9, 2.
WITH_OUTPUT = [8, 0, 4]
OUTPUT_AND_STAGE_0 = [8, 1]


def _runs(model: str) -> list[dict]:
    hooks = ("dflash",) if model in DFLASH_ONLY else ("eagle3", "dflash")
    runs = []
    for pp in (2, 3):
        for hook in hooks:
            runs += [
                {"model": model, "hook": hook, "layer_ids": EVERY_STAGE, "pp": pp},
                {"model": model, "hook": hook, "layer_ids": ON_STAGE_0, "pp": pp},
            ]
    if "eagle3" in hooks:
        runs.append({"model": model, "hook": "eagle3", "layer_ids": None, "pp": 3})
    runs.append({"model": model, "hook": "dflash", "layer_ids": EVERY_STAGE, "pp": 3})
    if model in OUTPUT_CAPTURE:
        runs += [
            {"model": model, "hook": "dflash", "layer_ids": WITH_OUTPUT, "pp": 2},
            {"model": model, "hook": "dflash", "layer_ids": OUTPUT_AND_STAGE_0, "pp": 3},
            {"model": model, "hook": "dflash", "layer_ids": WITH_OUTPUT, "pp": 3},
        ]
    return runs


def _baseline_runs(model: str) -> list[dict]:
    """The unpatched drive: each hook once per PP size, ids on every stage.  It shows the
    release's files fail or lose captures; the patched drive checks every combination."""
    hooks = ("dflash",) if model in DFLASH_ONLY else ("eagle3", "dflash")
    return [
        {"model": model, "hook": hook, "layer_ids": EVERY_STAGE, "pp": pp}
        for pp in (2, 3)
        for hook in hooks
    ]


def _check(root, runs):
    config = dict(num_layers=NUM_LAYERS, hidden_size=4, tokens=TOKENS, runs=runs, timeout=120)
    return run_check("stage_check", config, root, timeout=600)["runs"]


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("packer") / version, list(MODELS))
    return version, release, result, copy


def test_patch_applies_and_rewrites_the_packing_forward(patched):
    _, release, result, copy = patched
    for name in MODELS:
        decision = result.family.decisions[f"{name}.py"]
        assert decision.patched, decision.reason
        assert decision.capture_kinds == ("entry-gathered",)
        assert decision.final_capture == (name in OUTPUT_CAPTURE)
        rel = f"sglang/srt/models/{decision.forward.file}"
        text = (copy / rel).read_text()
        assert "return pp_aux_handoff(" in text and "pp_aux_collect(" not in text
        # The last stage's packer takes the earlier stages' captures right after it is
        # made: one packer, each capture copied once.
        made = "aux_hidden_states = AuxHiddenStatePacker(len(self.layers_to_capture))\n"
        assert (
            made
            + "        aux_hidden_states = pp_aux_seed(self, aux_hidden_states, pp_proxy_tensors)\n"
            in text
        )
        assert "aux_hidden_states.finalize()" in text
        assert "pp_aux_handoff" not in (release / rel).read_text()
    deepseek = (copy / "sglang/srt/models/deepseek_v2.py").read_text()
    # The named handoff keeps its own entries (top-k indices) and gains the aux ones.
    assert "return pp_aux_handoff(\n                self, proxy_tensors," in deepseek
    # mimo_v2's causal-LM forward no longer unpacks a non-last stage's PPProxyTensors.
    assert result.family.decisions["mimo_v2.py"].fixes
    proc = subprocess.run(
        ["git", "apply", "--check"],
        cwd=release,
        input=result.patch,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # Applied once: the patched copy needs nothing more.
    assert generate(copy, models=list(MODELS)).patch == ""


@pytest.mark.timeout(900)
def test_patched_stages_rebuild_the_packed_tensor_of_pp1(patched):
    _, _, _, copy = patched
    runs = [run for model in MODELS for run in _runs(model)]
    dropped = {
        "model": MODELS[0],
        "hook": "eagle3",
        "layer_ids": EVERY_STAGE,
        "pp": 2,
        "drop_aux": True,
    }
    results = _check(copy, [*runs, dropped])
    assert len(results) == len(runs) + 1
    for record in results[:-1]:
        assert record["ok"], record
        assert record["types"] == ["Tensor"] * len(TOKENS)
        assert record["shapes"] == record["expected_shapes"]
    # Three captures of width 4, packed side by side, in every microbatch (0 tokens too).
    assert results[0]["expected_shapes"] == [[3, 12], [0, 12], [2, 12]]
    assert results[1]["expected_shapes"] == [[3, 8], [0, 8], [2, 8]]
    with_output = [r for r in results if r["layer_ids"] == OUTPUT_AND_STAGE_0]
    assert with_output and with_output[0]["shapes"] == [[3, 8], [0, 8], [2, 8]]
    missing = results[-1]
    assert not missing["ok"]
    assert (
        "no 'aux_hidden_states' entry, so the aux captures of layers [0] are missing"
        in missing["error"]
    )


@pytest.mark.timeout(900)
def test_unpatched_stages_fail_or_lose_captures(patched, tmp_path):
    _, release, result, _ = patched
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    runs = [run for model in MODELS for run in _baseline_runs(model)]
    records = _check(baseline, runs)
    assert len(records) == len(runs)
    errors = []
    for record in records:
        assert not record["ok"], record
        errors.append(record["error"] or "")
    # Captures split over stages: the packer refuses to finalize a partial buffer.
    assert any("RuntimeError: captured 1 of 3 aux hidden states" in e for e in errors)
    assert any("RuntimeError: captured 2 of 3 aux hidden states" in e for e in errors)
    # mimo_v2 fails on the first non-last stage, capture or not.
    assert any("too many values to unpack" in e for e in errors)
