"""Benchmark the PP aux transport: bytes on the wire and step time, side by side.

P=4 stages in 4 processes (gloo on CPU), 4096 tokens x 4096 hidden, bfloat16, captures
either one per stage or all on stage 0, for no capture, relay and direct. Configurations
are interleaved round by round in one launch so they share the same machine conditions.
Bytes are counted on the wire by the harness (handoff tensors per key, direct isends) and
must equal the analytic values: relay moves each capture once per hop to the last stage,
direct once in all.

    python scripts/bench_pp_transport.py [--rounds 3] [--steps 2] [--tokens 4096]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codemods.ppcheck.runner import run_scenarios  # noqa: E402
from codemods.ppcheck.scenario import Scenario, expected_wire  # noqa: E402

WORLD = 4
NUM_LAYERS = 8  # two per stage
PLACEMENTS = {"one per stage": (1, 3, 5, 7), "all on stage 0": (0, 1)}


def configs():
    yield "no capture", "relay", None
    for placement, ids in PLACEMENTS.items():
        for mode in ("relay", "direct"):
            yield f"{mode}, {placement}", mode, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="microbatches per run")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    scenarios = []
    for _round in range(args.rounds + 1):  # round 0 warms up and is not timed
        for name, mode, ids in configs():
            scenarios.append(
                Scenario(
                    name=name,
                    world_size=WORLD,
                    mode=mode,
                    num_layers=NUM_LAYERS,
                    layer_ids=ids,
                    tokens=(args.tokens,) * args.steps,
                    hidden=args.hidden,
                    dtype="bfloat16",
                    inflight=1,  # one step at a time: a clean step time
                    light=True,
                    verify=False,
                )
            )
    started = time.monotonic()
    results = run_scenarios(scenarios, timeout=args.timeout)
    elapsed = time.monotonic() - started
    failed = [r for r in results if not r.passed]
    for r in failed:
        print(f"FAILED {r.scenario.name}: {r.status} {r.detail}")
    if failed:
        return 1

    rows = {}
    for position, r in enumerate(results):
        name = r.scenario.name
        row = rows.setdefault(name, {"times": [], "measured": set(), "scenario": r.scenario})
        reports = r.reports
        handoff_aux = sum(rep["wire"]["aux_bytes"] for rep in reports.values())
        base = sum(rep["wire"]["base_bytes"] for rep in reports.values())
        direct = sum(rep["direct"].get("direct_send_bytes", 0) for rep in reports.values())
        row["measured"].add((handoff_aux // args.steps, direct // args.steps, base // args.steps))
        if position >= len(results) // (args.rounds + 1):
            row["times"].extend(reports[0]["step_times"])

    print(
        f"P={WORLD}, {args.tokens} tokens x {args.hidden} hidden, bfloat16, gloo on CPU; "
        f"{args.rounds} interleaved rounds x {args.steps} steps per config ({elapsed:.0f}s)"
    )
    header = (
        f"{'config':<24} {'aux B/step analytic':>20} {'aux B/step measured':>20} "
        f"{'(handoff + direct)':>26} {'all tensor B/step':>18} {'median step ms':>15}"
    )
    print(header)
    print("-" * len(header))
    totals = {}
    for name, row in rows.items():
        assert len(row["measured"]) == 1, f"{name}: bytes differ between rounds"
        handoff_aux, direct, base = row["measured"].pop()
        expected = expected_wire(row["scenario"])
        analytic = (expected["aux_bytes"] + expected["direct_bytes"]) // args.steps
        measured = handoff_aux + direct
        assert measured == analytic, f"{name}: measured {measured} != analytic {analytic}"
        assert base * args.steps == expected["base_bytes"], f"{name}: base bytes differ"
        totals[name] = (analytic, measured)
        split = f"({handoff_aux:,} + {direct:,})"
        print(
            f"{name:<24} {analytic:>20,} {measured:>20,} {split:>26} "
            f"{base + measured:>18,} {statistics.median(row['times']) * 1000:>15.1f}"
        )
    print()
    for placement, want in (("one per stage", 2.0), ("all on stage 0", 3.0)):
        relay_a, relay_m = totals[f"relay, {placement}"]
        direct_a, direct_m = totals[f"direct, {placement}"]
        analytic_ratio, measured_ratio = relay_a / direct_a, relay_m / direct_m
        assert analytic_ratio == measured_ratio == want, (placement, analytic_ratio, measured_ratio)
        relay_t = statistics.median(rows[f"relay, {placement}"]["times"])
        direct_t = statistics.median(rows[f"direct, {placement}"]["times"])
        print(
            f"relay/direct bytes, {placement}: analytic {analytic_ratio:.1f}, "
            f"measured {measured_ratio:.1f}; step time relay/direct {relay_t / direct_t:.2f}"
        )
    print("bytes: measured == analytic for every config")
    return 0


if __name__ == "__main__":
    sys.exit(main())
