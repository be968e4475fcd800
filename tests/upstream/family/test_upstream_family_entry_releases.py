"""The family patch on the SGLang releases whose decoder stacks capture through a callback
at layer entry (0.5.22 and 0.5.23: llama, qwen3, laguna, gpt_oss, ...; 0.5.21: qwen3,
laguna, gpt_oss).

The patch for the chosen models passes ``git apply --check`` on the release, applies to a
copy and is empty on the patched copy.  The real causal-LM and decoder-stack classes of the
patched copy, imported on CPU, run as 2 and 3 pipeline stages in separate processes (gloo,
``sglang_support.stage_check``; microbatches of 3, 0 and 2 tokens; captures on every stage and
all on stage 0; with and without the last stage's own output among the captures): the last stage hands the logits processor exactly what a PP=1
run hands it (same count, order, ``torch.equal`` values, and an ``AuxHiddenStateList``).
Aux entries missing from the handoff make the last stage raise, naming the layers.  The
same drive of the release's own model files loses captures.
The family test the patch adds to SGLang passes in the patched copy for these models.
"""

from __future__ import annotations

import pytest
from sglang_support.env import run_check
from sglang_support.family_check import (
    patched_copy,
    run_family_tests,
    unpatched_copy,
    validated_models,
)

from codemods.upstream.family import registry
from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

#: release -> the models of the layer-entry shape driven there.
#: glm4_moe and glm4_moe_lite capture in a loop over a range narrowed for two-batch
#: overlap.
RELEASES = {
    # exaone_moe still appends in its layer loop on 0.5.21 (patched, not this shape).
    "0.5.21": (
        "qwen3",
        "laguna",
        "gpt_oss",
        "qwen3_moe",
        "minimax_m2",
        "glm4_moe",
        "glm4_moe_lite",
        "glm5_next",
    ),
    "0.5.22": (
        "llama",
        "qwen3",
        "laguna",
        "gpt_oss",
        "qwen3_moe",
        "exaone_moe",
        "minimax_m2",
        "glm4_moe",
        "glm4_moe_lite",
        "glm5_next",
    ),
    "0.5.23": (
        "llama",
        "qwen3",
        "laguna",
        "gpt_oss",
        "qwen3_moe",
        "exaone_moe",
        "minimax_m2",
        "glm4_moe",
        "glm4_moe_lite",
        "glm5_next",
    ),
}
#: glm5_next hands the layer a local function that prepares the capture and hands it
#: to the list (``family_entry_closure``), in a loop narrowed for two-batch overlap; on
#: 0.5.21 a model with hyper-connections (``config.mhc``) returns a bare
#: ``PPProxyTensors`` from the non-last-rank branch before ``to_pp``: driven too.
CLOSURE = {"glm5_next"}
EXTRA_RUNS = {
    "glm5_next": [{"hook": "eagle3", "layer_ids": [7, 0, 4], "pp": 3, "config": {"mhc": True}}],
}
#: Models with the gathered collector (flagged layers, or layers whose id is a capture
#: id, get the list itself: minimax_m2 tests the ids).  exaone_moe and minimax_m2 return
#: early through ``get_parallel().pp_group``.
GATHERED = {"qwen3_moe", "minimax_m2"}
#: Models whose last stage also captures its own output (capture id == number of
#: layers, taken by the final norm or as a snapshot of an empty batch).
OUTPUT_CAPTURE = {"laguna", "gpt_oss"}
#: Models with only a DFLASH hook, and with only an EAGLE3 hook.
DFLASH_ONLY = {"laguna"}
EAGLE3_ONLY = {"exaone_moe", "minimax_m2", "glm4_moe"}
#: 9 layers: PP=2 owns [0, 4) [4, 9), PP=3 owns [0, 3) [3, 6) [6, 9).
NUM_LAYERS = 9
TOKENS = [3, 0, 2]
#: Hook ids (captured before layer id + 1).  Every stage: capture ids 8, 1, 5 given out
#: of order; all on stage 0: capture ids 2, 1; ``None``: EAGLE3's default layers 2, 4, 6;
#: with the stage output: capture ids 9 (the output), 1, 5 and 9, 2.
EVERY_STAGE = [7, 0, 4]
ON_STAGE_0 = [1, 0]
WITH_OUTPUT = [8, 0, 4]
OUTPUT_AND_STAGE_0 = [8, 1]


def _runs(models):
    runs = []
    for model in models:
        eagle3 = "dflash" if model in DFLASH_ONLY else "eagle3"
        dflash = "eagle3" if model in EAGLE3_ONLY else "dflash"
        for pp in (2, 3):
            runs += [
                {"model": model, "hook": eagle3, "layer_ids": EVERY_STAGE, "pp": pp},
                {"model": model, "hook": dflash, "layer_ids": ON_STAGE_0, "pp": pp},
            ]
        if model not in DFLASH_ONLY:
            runs.append({"model": model, "hook": "eagle3", "layer_ids": None, "pp": 3})
        runs.append({"model": model, "hook": dflash, "layer_ids": EVERY_STAGE, "pp": 3})
        runs += [{"model": model, **extra} for extra in EXTRA_RUNS.get(model, [])]
        if model in OUTPUT_CAPTURE:
            runs += [
                {"model": model, "hook": dflash, "layer_ids": WITH_OUTPUT, "pp": 2},
                {"model": model, "hook": eagle3, "layer_ids": OUTPUT_AND_STAGE_0, "pp": 3},
            ]
    return runs


def _baseline_runs(models):
    """The unpatched drive: each model's hooks once, ids on every stage, 3 stages (where
    every stage owns captures).  It shows the release's files lose captures; the patched
    drive checks every combination."""
    runs = []
    for model in models:
        hooks = {"dflash" if model in DFLASH_ONLY else "eagle3"}
        hooks.add("eagle3" if model in EAGLE3_ONLY else "dflash")
        runs += [
            {"model": model, "hook": hook, "layer_ids": EVERY_STAGE, "pp": 3}
            for hook in sorted(hooks)
        ]
    return runs


def _check(root, runs):
    config = dict(num_layers=NUM_LAYERS, hidden_size=4, tokens=TOKENS, runs=runs, timeout=120)
    return run_check("stage_check", config, root, timeout=900)["runs"]


@pytest.fixture(scope="module", params=sorted(RELEASES))
def patched(request, sglang_release, tmp_path_factory):
    version = request.param
    release = sglang_release(version)
    models = list(RELEASES[version])
    result, copy = patched_copy(release, tmp_path_factory.mktemp("entry") / version, models)
    return version, release, result, copy


def test_patch_applies_and_rewrites_the_layer_entry_forwards(patched):
    version, release, result, copy = patched
    models = RELEASES[version]
    for name in models:
        decision = result.family.decisions[f"{name}.py"]
        assert decision.patched, decision.reason
        kind = "entry-gathered" if name in GATHERED else "entry-callback"
        assert decision.capture_kinds == (kind,)
        assert decision.final_capture == (name in OUTPUT_CAPTURE)
    for name in models:
        # The decoder-stack forward may live in another file (qwen3_moe -> qwen2_moe).
        rel = f"sglang/srt/models/{result.family.decisions[f'{name}.py'].forward.file}"
        text = (copy / rel).read_text()
        assert "return pp_aux_handoff(" in text and "pp_aux_collect(" in text
        assert "residual_batch.to_pp(hidden_states, forward_batch)" in text
        assert "pp_aux_handoff" not in (release / rel).read_text()
        if name in CLOSURE:
            assert "capture_output=capture_output" in text
    # glm5_next on 0.5.21: both returns of the non-last-rank branch hand the captures on.
    if version == "0.5.21":
        text = (copy / "sglang/srt/models/glm5_next.py").read_text()
        assert text.count("return pp_aux_handoff(") == 2
        assert 'PPProxyTensors({"hidden_states": hidden_states}),\n' in text
    # Applied once: the patched copy needs nothing more.
    assert generate(copy, models=list(models)).patch == ""


@pytest.mark.timeout(900)
def test_patched_stages_match_pp1_and_missing_entries_raise(patched):
    version, _, _, copy = patched
    models = RELEASES[version]
    runs = _runs(models)
    dropped = {
        "model": models[0],
        "hook": "eagle3",
        "layer_ids": EVERY_STAGE,
        "pp": 2,
        "drop_aux": True,
    }
    results = _check(copy, [*runs, dropped])
    assert len(results) == len(runs) + 1
    for record in results[:-1]:
        assert record["ok"], record
        assert record["aux_counts"] == record["expected_counts"]
        assert set(record["types"]) == {"AuxHiddenStateList"}
    assert results[0]["expected_counts"] == [3, 3, 3]
    missing = results[-1]
    assert not missing["ok"]
    assert (
        "the PP handoff has no 'aux_hidden_states' entry, so the aux "
        "captures of layers [1] are missing"
    ) in missing["error"]


@pytest.mark.timeout(900)
def test_unpatched_stages_lose_captures(patched, tmp_path):
    version, release, result, _ = patched
    baseline = unpatched_copy(release, tmp_path / "unpatched", result)
    runs = _baseline_runs(RELEASES[version])
    records = _check(baseline, runs)
    assert len(records) == len(runs)
    for record in records:
        assert not record["ok"], record
        counts = zip(record["aux_counts"] or [], record["expected_counts"], strict=False)
        lost = record["error"] is not None or any(got < want for got, want in counts)
        assert lost, record


@pytest.mark.timeout(900)
def test_generated_family_test_passes_for_the_layer_entry_models(patched):
    version, _, result, copy = patched
    models = list(RELEASES[version])
    runs = run_family_tests(copy, result, (2, 3), models, timeout=600)
    assert sorted(runs) == [2, 3]
    for pp_size, records in runs.items():
        assert {record["pp"] for record in records} == {pp_size}
        assert {record["model"] for record in records} == set(models)
        assert validated_models(records) == dict.fromkeys(models, True), records
        assert all(record["reference"] for record in records), records


#: What the whole patch (no ``--models``) rewrites on 0.5.23: the layer-entry shape
#: (nemotron_h snapshots at layer entry; bailing_moe_v3 gates its capture on the last
#: rank: ``test_upstream_family_gated_releases.py``; qwen3_vl enumerates its slice of the
#: stack; gemma4_causal, gemma4_mm and qwen2_5_vl store the ids on every rank, no early return,
#: and gemma4 builds its handoff from ``to_pp(...).tensors``; deepseek_v2 and mimo_v2 pack
#: their captures: ``test_upstream_packer_releases.py``), and deepseek_v4's literal
#: ``PPProxyTensors`` (``test_upstream_literal_proxy_releases``).
PATCHED_0_5_23 = (
    "apertus",
    "bailing_moe",
    "bailing_moe_v3",
    "deepseek_v2",
    "deepseek_v4",
    "exaone_moe",
    "gemma4_causal",
    "gemma4_mm",
    "glm4_moe",
    "glm4_moe_lite",
    "glm5_next",
    "gpt_oss",
    "laguna",
    "llama",
    "mimo_v2",
    "minimax_m2",
    "minimax_m3",
    "minimax_m3_vl",
    "nemotron_h",
    "qwen2",
    "qwen2_5_vl",
    "qwen2_moe",
    "qwen3",
    "qwen3_5_text",
    "qwen3_moe",
    "qwen3_vl",
    # Inherits qwen3_vl's hooks and builds its own stack (``family/planning/subclass.py``).
    "qwen3_vl_moe",
)
#: Not in the layer-entry shape.
LITERAL_PROXY = ("deepseek_v4",)
#: ``qwen3_5_text`` is left out of the CPU run: its module does not import with the
#: ``triton`` stand-in (``fla/utils.py`` asks triton's driver for the device at import).
VALIDATED_ON_CPU = tuple(name for name in PATCHED_0_5_23 if name != "qwen3_5_text")


@pytest.mark.timeout(1200)
def test_whole_patch_on_0_5_23_applies_and_its_family_test_passes(sglang_release, tmp_path):
    release = sglang_release("0.5.23")
    result, copy = patched_copy(release, tmp_path / "whole")
    decisions = result.family.decisions
    patched = sorted(d.name for d in decisions.values() if d.patched)
    assert patched == sorted(PATCHED_0_5_23)
    assert all(
        registry.is_layer_entry(decisions[f"{name}.py"].capture_kinds) != (name in LITERAL_PROXY)
        for name in patched
    )
    # Kimi-Linear already relays its DSPARK captures on this release: its entry is renamed
    # for every capture method and the relay goes through the shared helpers.
    kimi_change = next(c for c in result.changes if c.path.endswith("/kimi_linear.py"))
    assert "dspark_hidden_states" not in kimi_change.new
    assert "set_pp_aux_capture(" in kimi_change.new
    assert "torch.cat(aux_hidden_states" not in kimi_change.new.replace("\n", "").replace(" ", "")
    runs = run_family_tests(copy, result, (2, 3), list(VALIDATED_ON_CPU), timeout=900)
    assert sorted(runs) == [2, 3]
    for pp_size, records in runs.items():
        assert {record["pp"] for record in records} == {pp_size}
        assert validated_models(records) == dict.fromkeys(VALIDATED_ON_CPU, True), records
