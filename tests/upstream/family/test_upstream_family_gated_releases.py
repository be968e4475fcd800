"""The family patch on bailing_moe_v3 of SGLang 0.5.21-0.5.23, whose decoder stack creates
its capture list only on the last rank and captures raw layer id ``j`` at the entry of
layer ``j + 1`` (``family_entry_gated``).

Per release: the patch for the model applies to a copy, rewrites the forward (every stage
captures, id ``start_layer - 1`` at the entry of a later stage's first layer, the handoff
and the gathering skip empty batches), attaches the transport to the stack's entry ids,
and is empty on the patched copy.  The copy's real causal-LM and decoder-stack classes,
imported on CPU, run as 2 and 3 pipeline stages in separate processes (gloo,
``sglang_support.stage_check``; microbatches of 3, 0 and 2 tokens; captures on every stage,
each stage's last layer among them, and all on stage 0; 2 and 3 stages):
the last stage hands the drafter exactly what a PP=1 run hands it (same count, order,
``torch.equal`` values, an ``AuxHiddenStateList``, nothing for the empty microbatch).
Aux entries missing from the handoff make the last stage raise, naming the layers.  The
release as shipped loses captures (``test_upstream_pp_refusals_releases.py``).
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python
from sglang_support.family_check import patched_copy

from codemods.upstream.family import registry
from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
MODEL = "bailing_moe_v3"
#: 9 layers: PP=2 owns [0, 4) [4, 9), PP=3 owns [0, 3) [3, 6) [6, 9).  Raw DSPARK ids,
#: id ``j`` taken at the entry of layer ``j + 1`` (id 8 by the final norm).  Every stage,
#: given out of order: each stage's last layer (3 on PP=2; 2 and 5 on PP=3) is captured
#: at the next stage's first layer.  All on stage 0, with id -1 that no run takes.
EVERY_STAGE_2 = [8, 0, 3, 5]
EVERY_STAGE_3 = [8, 0, 2, 5]
ON_STAGE_0 = [1, 0, -1]
RUNS = [
    {"model": MODEL, "hook": "dspark", "layer_ids": EVERY_STAGE_2, "pp": 2},
    {"model": MODEL, "hook": "dspark", "layer_ids": ON_STAGE_0, "pp": 2},
    {"model": MODEL, "hook": "dspark", "layer_ids": EVERY_STAGE_3, "pp": 3},
    {"model": MODEL, "hook": "dspark", "layer_ids": ON_STAGE_0, "pp": 3},
    {"model": MODEL, "hook": "dspark", "layer_ids": EVERY_STAGE_3, "pp": 3},
]
DROPPED = {"model": MODEL, "hook": "dspark", "layer_ids": EVERY_STAGE_2, "pp": 2, "drop_aux": True}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", RELEASES)
def test_patched_bailing_moe_v3_matches_pp1(sglang_release, tmp_path, version):
    release = sglang_release(version)
    result, copy = patched_copy(release, tmp_path / version, [MODEL])
    decision = result.family.decisions[f"{MODEL}.py"]
    assert decision.patched, decision.reason
    assert decision.capture_kinds == ("entry-gated",)
    # The comment above the gate tied capture to the last stage: restated, not stale.
    assert decision.stale_comments == ()
    rel = "sglang/srt/models/bailing_moe_v3.py"
    text = (copy / rel).read_text()
    assert "rank owns the final pipeline stage" in (release / rel).read_text()
    assert "final pipeline stage" not in text
    assert (
        "        # completed hidden state of each layer; each pipeline stage captures the\n"
        "        # layers it runs for the last one.\n"
        "        # Gate on capture_hidden_mode"
    ) in text
    assert "self.capture_aux_hidden_states\n            and self.layers_to_capture" in text
    assert "and i > 0\n" in text and "i > self.start_layer" not in text
    ids_attr = next(s.setter_ids_attr for s in registry.SHAPES if s.name == "gated")
    assert f'ids_attr="{ids_attr}"' in text
    assert f"def {ids_attr}(self):" in text
    assert 'if capture_aux and handoff["hidden_states"].shape[0] != 0:' in text
    assert "pp_aux_handoff" not in (release / rel).read_text()
    assert generate(copy, models=[MODEL]).patch == ""

    config = {
        "num_layers": 9,
        "hidden_size": 4,
        "tokens": [3, 0, 2],
        "runs": [*RUNS, DROPPED],
        "timeout": 120,
    }
    proc = run_python(["-m", "sglang_support.stage_check", json.dumps(config)], copy, timeout=540)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = json.loads(proc.stdout.strip().splitlines()[-1])["runs"]
    assert len(records) == len(RUNS) + 1
    for record in records[:-1]:
        assert record["ok"], record
        assert record["aux_counts"] == record["expected_counts"]
        assert record["types"] == ["AuxHiddenStateList", "list", "AuxHiddenStateList"]
    # PP=1 takes every id but -1 and nothing for the empty microbatch.
    assert [r["expected_counts"] for r in records[:-1]] == [
        [4, 0, 4],
        [2, 0, 2],
        [4, 0, 4],
        [2, 0, 2],
        [4, 0, 4],
    ]
    missing = records[-1]
    assert not missing["ok"]
    assert (
        "the PP handoff has no 'aux_hidden_states' entry, so the aux captures of "
        "layers [1] are missing"
    ) in missing["error"]
