"""What the upstream patch says about the SGLang 0.5.21-0.5.23 models of an unusual
shape that have a capture hook and run under PP, and that what it says is true.

- ``beam`` (0.5.23 only): its DFLASH hook raises ``ValueError`` under PP in its own code.
  The real hook, called on CPU with a PP group of 2 and 3 ranks, raises exactly that and
  stores no ids; with one rank it stores them.  The patch leaves it alone.
- ``bailing_moe_v3`` (0.5.21-0.5.23): its decoder stack captures on the last rank only
  (a gate with ``is_last_rank``), never at its stage's first layer, and skips empty
  batches.  The patch rewrites it (``family_entry_gated``; the patched stages are driven
  by ``test_upstream_family_gated_releases.py``).  The release as shipped, its real
  causal-LM and decoder-stack classes driven as 2 and 3 gloo stages with stand-in layers
  (``sglang_support.stage_check``; microbatches of 3, 0 and 2 tokens), hands the DSPARK
  drafter fewer captures than a PP=1 run, and no stage raises: the loss the patch fixes.

glm5_next, the other model of these releases with an unusual shape, is patched
(``test_upstream_family_entry_releases.py`` drives it).
"""

from __future__ import annotations

import json

import pytest
from sglang_support.env import run_python

from codemods.upstream.family.plan import RAISES_PP, plan_family

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASES = ("0.5.21", "0.5.22", "0.5.23")
BEAM_REASON = (
    f"{RAISES_PP}: `set_dflash_layers_to_capture` (`if self.model.pp_group.world_size "
    '!= 1: raise ValueError("Beam DFlash capture currently requires PP=1")`): it fails '
    "loudly under PP, so no capture is lost silently"
)
#: Raw DSPARK ids: on 2 stages ([0, 4) [4, 9)) one id per stage and the last layer; on
#: 3 stages ([0, 3) [3, 6) [6, 9)) both on the first stage.
BAILING_RUNS = [
    {"model": "bailing_moe_v3", "hook": "dspark", "layer_ids": [0, 4, 8], "pp": 2},
    {"model": "bailing_moe_v3", "hook": "dspark", "layer_ids": [1, 2], "pp": 3},
]


@pytest.mark.parametrize("version", RELEASES)
def test_report_names_what_each_model_does(sglang_release, version):
    release = sglang_release(version)
    plan = plan_family(
        release / "sglang" / "srt" / "models", only=["glm5_next", "bailing_moe_v3", "beam"]
    )
    decisions = plan.decisions
    assert decisions["glm5_next.py"].patched
    assert decisions["glm5_next.py"].capture_kinds == ("entry-callback",)
    assert decisions["bailing_moe_v3.py"].patched
    assert decisions["bailing_moe_v3.py"].capture_kinds == ("entry-gated",)
    if version == "0.5.23":
        assert not decisions["beam.py"].patched
        assert decisions["beam.py"].reason == BEAM_REASON
        assert decisions["beam.py"].early_return == ()
    else:
        assert "beam.py" not in decisions
        assert not (release / "sglang" / "srt" / "models" / "beam.py").exists()


@pytest.mark.timeout(600)
def test_beam_hook_raises_under_pp_and_stores_nothing(sglang_release):
    spec = {
        "model": "beam",
        "class": "BeamForCausalLM",
        "hook": "set_dflash_layers_to_capture",
        "layer_ids": [1, 4],
        "pp": [1, 2, 3],
    }
    proc = run_python(
        ["-m", "sglang_support.validation_check", "--refusals", json.dumps(spec)],
        sglang_release("0.5.23"),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["1"] == {"error": None, "ids": [1, 4]}
    for size in ("2", "3"):
        assert report[size] == {
            "error": "ValueError: Beam DFlash capture currently requires PP=1",
            "ids": None,
        }


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", RELEASES)
def test_bailing_moe_v3_as_released_loses_captures_under_pp(sglang_release, version):
    reference = {"model": "bailing_moe_v3", "hook": "dspark", "layer_ids": [1, 5, 7], "pp": 1}
    config = {
        "num_layers": 9,
        "hidden_size": 4,
        "tokens": [3, 0, 2],
        "runs": [reference, *BAILING_RUNS],
        "timeout": 120,
    }
    proc = run_python(
        ["-m", "sglang_support.stage_check", json.dumps(config)],
        sglang_release(version),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    single, two, three = json.loads(proc.stdout.strip().splitlines()[-1])["runs"]
    # The drive itself: one stage hands the drafter every capture (none for the empty
    # microbatch, which the capture function skips).
    assert single["ok"], single
    assert single["aux_counts"] == single["expected_counts"] == [3, 0, 3]
    # Under PP no stage raises, and the last stage hands on fewer captures.
    assert two["error"] is None and three["error"] is None
    assert two["expected_counts"] == [3, 0, 3] and two["aux_counts"] == [2, 0, 2]
    assert three["expected_counts"] == [2, 0, 2] and three["aux_counts"] == [0, 0, 0]
    assert not two["ok"] and not three["ok"]
