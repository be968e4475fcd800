"""The PP validation harness in real multi-process runs (gloo on CPU): relay and direct for
world sizes 2-4, the mismatch handshake, broken transports that must FAIL or HANG, the
analytic wire bytes, and the validate-pp command (the whole matrix is CI's proof)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.ppcheck import Scenario, build_matrix, expected_wire, run_scenarios
from codemods.ppcheck.scenario import with_fault

ROOT = Path(__file__).resolve().parents[2]


def _pick(world, mode, name):
    matches = [s for s in build_matrix(world, (mode,), min_world_size=world) if s.name == name]
    assert len(matches) == 1, (world, mode, name)
    return matches[0]


SUBSET = [
    _pick(2, "relay", "one-per-stage [even]"),
    _pick(2, "direct", "stage-boundaries [env 5,2]"),
    _pick(2, "relay", "ids differ on last rank"),
    _pick(3, "direct", "stage-boundaries [env 2,5,3]"),
    _pick(3, "relay", "all-middle-stage [uneven]"),
    _pick(3, "relay", "4096 tokens bfloat16"),
    _pick(3, "direct", "invalid id on rank 0 only"),
    _pick(4, "relay", "ids past 9 in numeric order"),
    _pick(4, "direct", "one-per-stage [uneven]"),
    _pick(4, "direct", "all-first-stage [even]"),
    _pick(4, "direct", "0 tokens bfloat16"),
    _pick(4, "direct", "in-place layers float32"),
    _pick(4, "relay", "capture off float32"),
    _pick(4, "direct", "ids differ on last rank"),
    replace(
        _pick(3, "direct", "ids differ on last rank"),
        name="ids differ, plan built then handshake()",
        extra={"handshake_method": True},
    ),
]


@pytest.fixture(scope="module")
def subset_results():
    return {r.scenario.label(): r for r in run_scenarios(SUBSET, timeout=60)}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", SUBSET, ids=lambda s: s.label())
def test_subset_passes(subset_results, scenario):
    result = subset_results[scenario.label()]
    assert result.passed, (result.status, result.detail)
    assert set(result.reports) == set(range(scenario.world_size))


@pytest.mark.timeout(900)
def test_mismatch_raises_on_every_rank_quickly(subset_results):
    for scenario in SUBSET:
        if scenario.expect != "error":
            continue
        reports = subset_results[scenario.label()].reports
        assert len(reports) == scenario.world_size
        for report in reports.values():
            assert report["type"] == "ValueError"
            assert report["elapsed"] < 30
            assert "aux capture config" in report["message"]


@pytest.mark.timeout(900)
def test_wire_evidence(subset_results):
    direct = subset_results["P=4 direct one-per-stage [uneven]"].reports
    assert direct[0]["direct"]["direct_send_bytes"] > 0  # stage 0 sent straight to the last
    assert direct[2]["direct"]["direct_send_bytes"] == 0  # next to the last: handoff
    assert direct[3]["direct"]["direct_recv_bytes"] == sum(
        direct[r]["direct"]["direct_send_bytes"] for r in range(3)
    )
    assert direct[0]["direct"]["direct_sends"] == 5  # 6 microbatches, one has 0 tokens
    zero = subset_results["P=4 direct 0 tokens bfloat16"].reports
    assert sum(rep["direct"].get("direct_sends", 0) for rep in zero.values()) == 0
    assert zero[3]["direct"]["direct_recvs"] == 0
    off = subset_results["P=4 relay capture off float32"].reports
    for stage in range(3):
        assert {tuple(k) for k in off[stage]["wire"]["keys"]} == {("hidden_states", "residual")}
        assert off[stage]["wire"]["aux_bytes"] == 0
    numeric = subset_results["P=4 relay ids past 9 in numeric order"].reports
    assert numeric[2]["wire"]["keys"][0][2:] == ["aux_hidden_states"]
    ahead = subset_results["P=4 direct all-first-stage [even]"].reports[0]
    assert ahead["max_inflight"] == 5 and ahead["outputs"] == list(range(6))


FAULTY = [
    with_fault(_pick(3, "relay", "stage-boundaries [even]"), "sorted-order"),
    with_fault(_pick(3, "relay", "ids past 9 in numeric order"), "string-id-order"),
    with_fault(_pick(3, "direct", "one-per-stage [even]"), "stale-capture"),
    with_fault(_pick(3, "direct", "all-first-stage [even]"), "skip-direct-send"),
    with_fault(_pick(3, "relay", "stage-boundaries [uneven]"), "drop-pass-through"),
    _pick(3, "relay", "final-layer [even]"),
]


@pytest.mark.timeout(900)
def test_broken_transports_fail_and_a_hang_is_killed():
    results = {r.scenario.fault: r for r in run_scenarios(FAULTY, timeout=15)}
    assert results["sorted-order"].status == "FAIL"
    assert "differs from PP=1" in results["sorted-order"].detail
    assert results["string-id-order"].status == "FAIL"
    assert "differs from PP=1" in results["string-id-order"].detail
    assert results["stale-capture"].status == "FAIL"
    assert results["skip-direct-send"].status == "HANG"
    assert results["drop-pass-through"].status == "FAIL"
    assert "4 aux states, PP=1 gave 6" in results["drop-pass-through"].detail
    assert results[None].passed, results[None].detail  # a fresh launch after the kills


def test_analytic_bytes_match_the_hop_counts():
    def scenario(ids, mode):
        return Scenario("b", 4, mode, 8, ids, (4096,), hidden=4096, dtype="bfloat16")

    capture = 4096 * 4096 * 2
    relay = expected_wire(scenario((1, 3, 5, 7), "relay"))
    direct = expected_wire(scenario((1, 3, 5, 7), "direct"))
    assert relay["aux_bytes"] == capture * (3 + 2 + 1)
    assert (direct["aux_bytes"], direct["direct_bytes"]) == (capture, 2 * capture)
    assert relay["aux_bytes"] / (direct["aux_bytes"] + direct["direct_bytes"]) == 2.0
    relay0 = expected_wire(scenario((0, 1), "relay"))
    direct0 = expected_wire(scenario((0, 1), "direct"))
    assert relay0["aux_bytes"] / (direct0["aux_bytes"] + direct0["direct_bytes"]) == 3.0
    assert relay["base_bytes"] == 2 * capture * 3
    assert relay["keys"][2] == ["hidden_states", "residual", "aux_hidden_states"]
    assert relay["keys"][0] == ["hidden_states", "residual", "aux_hidden_states"]
    assert direct["keys"][0] == ["hidden_states", "residual"]
    assert direct0["direct_messages"] == 2
    empty = expected_wire(replace(scenario((0, 1), "direct"), tokens=(0, 0)))
    assert empty["aux_bytes"] == empty["direct_bytes"] == empty["base_bytes"] == 0
    assert empty["direct_messages"] == 0


def test_matrix_covers_the_required_cases():
    matrix = build_matrix(4)
    names = {s.name for s in matrix}
    assert {s.world_size for s in matrix} == {2, 3, 4}
    assert {s.mode for s in matrix} == {"relay", "direct"}
    for world in (2, 3, 4):
        of_world = [s for s in matrix if s.world_size == world]
        assert any(s.partition for s in of_world)
        assert all(len(s.tokens) >= world + 1 for s in of_world)
    assert {t for s in matrix for t in s.tokens} >= {0, 1, 5, 4096}
    assert {s.dtype for s in matrix} == {"float32", "bfloat16"}
    for needle in (
        "all-first-stage",
        "all-middle-stage",
        "all-last-stage",
        "one-per-stage",
        "stage-boundaries",
        "final-layer",
        "stage-1-without-capture",
        "in-place",
        "capture off",
        "ids differ",
        "uneven",
    ):
        assert any(needle in name for name in names), needle


def test_cli_refuses_nccl_without_gpus():
    result = CliRunner().invoke(cli, ["validate-pp", "--backend", "nccl", "--world-size", "2"])
    assert result.exit_code == 2
    assert "needs 2 GPUs" in result.output


def test_cli_refuses_an_empty_selection():
    result = CliRunner().invoke(cli, ["validate-pp", "--select", "no such scenario"])
    assert result.exit_code == 2


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_full_matrix_world_size_4_both_modes():
    """CI's proof: the whole matrix, as a user runs it."""
    proc = subprocess.run(
        [sys.executable, "-m", "codemods", "validate-pp", "--world-size", "4", "--mode", "both"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    expected = len(build_matrix(4))
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    assert f"{expected}/{expected} scenarios passed" in proc.stdout
    assert proc.stdout.count(" PASS ") == expected


def test_ids_the_plan_refuses_are_judged_failed_not_raised():
    """A factory with its own id scheme (a model's raw ids, -1 among them) gets a verdict
    saying why no wire bytes can be expected, instead of an exception from the judge."""
    from codemods.ppcheck.runner import judge

    scenario = Scenario("raw ids", 2, "relay", 9, (1, 0, -1), (3,), hidden=4, verify=False)
    ok = {"status": "ok", "outputs": [0]}
    passed, detail = judge(scenario, {0: ok, 1: ok})
    assert not passed
    assert detail.startswith("no analytic wire bytes for these layer ids:"), detail
