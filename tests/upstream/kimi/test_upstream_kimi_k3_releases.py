"""The Kimi-K3 part of the generated patch on real SGLang releases.

For 0.5.18, 0.5.19 and 0.5.20: ``--models kimi_k3`` patches ``kimi_k3.py`` (plus the
helpers the setter calls), the patch passes ``git apply --check`` on the release tree, is empty on
the patched copy, and the patched ``KimiK3LinearModel`` / ``KimiK3LinearForCausalLM``,
imported on CPU and driven as real pipeline stages in forked gloo processes (2 and 3
stages, with and without attention residuals, captures on every stage and on every stage
boundary, three microbatches incl. an empty one), hand the logits processor exactly the aux
states of the PP=1 run (torch.equal).  Unpatched, the setter raises NotImplementedError,
and with the guard bypassed the last stage gets fewer captures (plain residual stream) or
a stage fails (attention residuals).  0.5.21+ is reported as supported: only its relay's
entry is renamed, with the family patch.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sglang_support.env import git_apply, linked_copy, run_check
from sglang_support.generated import release_result

from codemods.cli.commands import cli
from codemods.upstream.generate import generate
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.output import series

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PATCHED_RELEASES = ("0.5.18", "0.5.19", "0.5.20")
# 7 layers: PP=2 owns [0,3) [3,7), PP=3 owns [0,2) [2,4) [4,7).  Layers 1, 2 and 3 end a
# stage in one of them (mixed on the next stage), 6 is the model's last layer (output-side
# weights), 0 the first; attention-residual blocks of 2 layers.
SCENARIO = {
    "model": "kimi_k3",
    "num_layers": 7,
    "hidden_size": 4,
    "layer_ids": [6, 0, 2, 3, 1],
    "tokens": [3, 0, 2],
    "timeout": 200,
}
K3_FILE = "sglang/srt/models/kimi_k3.py"


def _check(root, runs):
    return run_check("stage_check", dict(SCENARIO, runs=runs), root, timeout=900)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_patched_kimi_k3_matches_pp1(sglang_release, tmp_path, version):
    release = sglang_release(version)
    result = generate(release, models=["kimi_k3"])
    assert result.model("kimi_k3").status == kimi.NEEDS_PATCH
    assert result.changed == [
        K3_FILE,
        "sglang/srt/layers/aux_hidden_states.py",
        # the runtime guard where the runner configures the capture, and the runner
        # passing it its PP size
        "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py",
        "sglang/srt/model_executor/model_runner.py",
    ]
    check = git_apply(release, result.patch, check=True)
    assert check.returncode == 0, check.stderr
    copy = linked_copy(release, tmp_path / "sglang", result.changed)
    applied = git_apply(copy, result.patch)
    assert applied.returncode == 0, applied.stderr
    again = generate(copy, models=["kimi_k3"])
    assert again.model("kimi_k3").status == kimi.PATCHED and again.patch == ""
    assert "PPAuxRelay" not in (release / K3_FILE).read_text()

    report = _check(
        copy,
        [
            {"pp": 2, "attn_res_block_size": 2},
            {"pp": 3, "attn_res_block_size": 2},
            {"pp": 2},
            {"pp": 3},
        ],
    )
    assert report["module"].startswith(str(copy))
    for run in report["runs"]:
        assert run.get("error") is None, run.get("error")
        assert run["ok"], run
        assert run["aux_counts"] == run["expected_counts"] == [5, 5, 5]


@pytest.mark.timeout(900)
def test_unpatched_kimi_k3_raises_or_loses_captures(sglang_release):
    release = sglang_release("0.5.20")
    report = _check(
        release,
        [
            {"pp": 2},
            {"pp": 3, "bypass_setter": True},
            {"pp": 2, "attn_res_block_size": 2, "bypass_setter": True},
        ],
    )
    raised, lost, broken = report["runs"]
    assert not raised["ok"]
    assert "NotImplementedError: DSPARK aux hidden capture requires PP=1." in raised["error"]
    assert not lost["ok"] and lost["aux_counts"] is not None
    pairs = zip(lost["aux_counts"], lost["expected_counts"], strict=True)
    assert all(got < want for got, want in pairs)
    # Attention residuals: the stage's last layer is mixed with weights it does not have.
    assert not broken["ok"] and "output_attn_res_proj" in broken["error"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", ("0.5.21", "0.5.23"))
def test_kimi_k3_with_own_relay_is_reported_as_supported(sglang_release, tmp_path, version):
    release = sglang_release(version)
    out = tmp_path / "p.patch"
    outcome = CliRunner().invoke(
        cli, ["upstream-patch", str(release), "-o", str(out), "--models", "kimi_k3"]
    )
    assert outcome.exit_code == 0, outcome.output
    assert (
        "Kimi-K3 (kimi_k3.py): already supports DSPARK aux capture under PP; not patched"
    ) in outcome.output
    assert out.read_text() == ""
    assert generate(release, models=["kimi_k3"]).model("kimi_k3").status == kimi.SUPPORTED


@pytest.mark.timeout(600)
def test_full_patch_on_0_5_20_includes_kimi_k3_and_applies(sglang_release):
    release = sglang_release("0.5.20")
    result = release_result(release)
    assert result.model("kimi_k3").status == kimi.NEEDS_PATCH
    assert K3_FILE in result.changed
    assert result.changed.count("sglang/srt/layers/aux_hidden_states.py") == 1
    check = git_apply(release, result.patch, check=True)
    assert check.returncode == 0, check.stderr
    decision = result.family.decisions["kimi_k3.py"]
    assert not decision.patched and "Kimi-K3 rewriter" in decision.reason
    # In the series, Kimi-K3 rides the Kimi DSPARK relay patch with Kimi-Linear.
    (relay,) = [p for p in series.build_series(result) if p.key == series.KIMI]
    assert {"kimi_linear", "kimi_k3"} <= set(relay.models)
    assert K3_FILE in [change.path for change in relay.changes]
