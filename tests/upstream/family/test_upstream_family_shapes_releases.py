"""The family patch on decoder stacks that snapshot the residual stream at layer entry
into a plain list (nemotron_h, SGLang 0.5.21-0.5.23), and on hooks that store the ids
on every rank of a split stack (gemma4_causal, 0.5.22-0.5.23).

On every release the patch for nemotron_h passes ``git apply --check``, applies to a
copy, rewrites the stack forward (``pp_aux_handoff`` around ``residual_batch.to_pp``,
``pp_aux_collect`` after the last stage's own output snapshot) and is empty on the
patched copy.  On 0.5.23 the real ``NemotronHForCausalLM`` / ``NemotronHModel`` of the
patched copy, imported on CPU, run as 2 and 3 pipeline stages in separate processes
(gloo, ``sglang_support.stage_check``; microbatches of 3, 0 and 2 tokens; captures on every
stage, all on stage 0, with the last stage's output among them; 2 and 3
stages): the last stage hands the logits processor exactly what a PP=1 run hands it
(same count, order, ``torch.equal`` values, a plain ``list``).  Aux entries missing from
the handoff make the last stage raise, naming the layers; the release's own file loses
captures.  gemma4_causal (both hooks, EAGLE3's default layers, the last stage's output
among the captures) is driven the same way on 0.5.23 and returns an
``AuxHiddenStateList`` as PP=1 does.
"""

from __future__ import annotations

import pytest
from sglang_support.env import run_check
from sglang_support.family_check import patched_copy, unpatched_copy

from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

MODEL = "nemotron_h"
RELEASES = ("0.5.21", "0.5.22", "0.5.23")
DRIVEN = "0.5.23"
#: 9 layers: PP=2 owns [0, 4) [4, 9), PP=3 owns [0, 3) [3, 6) [6, 9).
NUM_LAYERS = 9
TOKENS = [3, 0, 2]
#: DFLASH ids (captured before layer id + 1): every stage (8, 1, 5 out of order), all on
#: stage 0 (2, 1), with the last stage's output (9 == NUM_LAYERS) and every stage, and
#: with the output and stage 0.
EVERY_STAGE = [7, 0, 4]
ON_STAGE_0 = [1, 0]
WITH_OUTPUT = [8, 0, 4]
OUTPUT_AND_STAGE_0 = [8, 1]
GEMMA = "gemma4_causal"
#: Releases on which gemma4_causal's forward has the layer-entry shape.
GEMMA_RELEASES = ("0.5.22", "0.5.23")
GEMMA_RUNS = [
    {"model": GEMMA, "hook": "eagle3", "layer_ids": EVERY_STAGE, "pp": 2},
    {"model": GEMMA, "hook": "dflash", "layer_ids": ON_STAGE_0, "pp": 3},
    {"model": GEMMA, "hook": "eagle3", "layer_ids": None, "pp": 3},
    {"model": GEMMA, "hook": "dflash", "layer_ids": WITH_OUTPUT, "pp": 2},
    {"model": GEMMA, "hook": "eagle3", "layer_ids": OUTPUT_AND_STAGE_0, "pp": 3},
]
CONTAINERS = {MODEL: "list", GEMMA: "AuxHiddenStateList"}
RUNS = [
    *(
        {"model": MODEL, "hook": "dflash", "layer_ids": ids, "pp": pp}
        for pp in (2, 3)
        for ids in (EVERY_STAGE, ON_STAGE_0, WITH_OUTPUT)
    ),
    {"model": MODEL, "hook": "dflash", "layer_ids": EVERY_STAGE, "pp": 3},
    {"model": MODEL, "hook": "dflash", "layer_ids": OUTPUT_AND_STAGE_0, "pp": 3},
    *GEMMA_RUNS,
]


def _check(root, runs):
    config = dict(num_layers=NUM_LAYERS, hidden_size=4, tokens=TOKENS, runs=runs, timeout=120)
    return run_check("stage_check", config, root, timeout=900)["runs"]


@pytest.fixture(scope="module", params=RELEASES)
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    models = [MODEL, GEMMA] if version in GEMMA_RELEASES else [MODEL]
    result, copy = patched_copy(release, tmp_path_factory.mktemp("snapshot") / version, models)
    return version, release, result, copy


def test_patch_applies_and_rewrites_the_snapshot_forward(patched):
    version, release, result, copy = patched
    decision = result.family.decisions[f"{MODEL}.py"]
    assert decision.patched, decision.reason
    assert decision.capture_kinds == ("entry-snapshot",)
    assert decision.final_capture
    rel = f"sglang/srt/models/{MODEL}.py"
    text = (copy / rel).read_text()
    assert "return pp_aux_handoff(" in text
    assert "self, aux_hidden_states, pp_proxy_tensors, final=True" in text
    assert text.index("residual_batch.snapshot(hidden_states") < text.index("pp_aux_collect(\n")
    assert "if not self.pp_group.is_last_rank:\n            return\n" not in text
    assert "pp_aux_handoff" not in (release / rel).read_text()
    assert generate(copy, models=[MODEL]).patch == ""
    if version in GEMMA_RELEASES:
        gemma = result.family.decisions[f"{GEMMA}.py"]
        assert gemma.patched and gemma.early_return == (), gemma.reason
        assert gemma.capture_kinds == ("entry-callback",) and gemma.final_capture
        text = (copy / f"sglang/srt/models/{GEMMA}.py").read_text()
        assert "self, PPProxyTensors(proxy), aux_hidden_states, pp_proxy_tensors" in text
        assert text.count("self.model, self.pp_group, hidden_size=self.config.hidden_size") == 2
        assert generate(copy, models=[GEMMA]).patch == ""


@pytest.fixture(scope="module")
def driven(sglang_release, tmp_path_factory):
    release = sglang_release(DRIVEN)
    result, copy = patched_copy(release, tmp_path_factory.mktemp("snapshot_drive"), [MODEL, GEMMA])
    return release, result, copy


@pytest.mark.timeout(900)
def test_patched_stages_match_pp1_and_missing_entries_raise(driven):
    _, _, copy = driven
    dropped = {
        "model": MODEL,
        "hook": "dflash",
        "layer_ids": EVERY_STAGE,
        "pp": 2,
        "drop_aux": True,
    }
    results = _check(copy, [*RUNS, dropped])
    assert len(results) == len(RUNS) + 1
    for record in results[:-1]:
        assert record["ok"], record
        assert record["aux_counts"] == record["expected_counts"]
        assert set(record["types"]) == {CONTAINERS[record["model"]]}
    assert results[0]["expected_counts"] == [3, 3, 3]
    # The output snapshot is taken for the empty microbatch too.
    assert results[2]["expected_counts"] == [3, 3, 3]
    missing = results[-1]
    assert not missing["ok"]
    assert (
        "no 'aux_hidden_states' entry, so the aux captures of layers [1] are missing"
        in missing["error"]
    )


@pytest.mark.timeout(900)
def test_unpatched_stages_lose_captures(driven, tmp_path):
    release, result, _ = driven
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    runs = RUNS
    for record in _check(baseline, runs):
        assert not record["ok"], record
        counts = zip(record["aux_counts"] or [], record["expected_counts"], strict=False)
        lost = record["error"] is not None or any(got < want for got, want in counts)
        assert lost, record
