"""Command run in a subprocess under ``env.sglang_env``: drive Kimi-Linear stages of the
SGLang tree on ``PYTHONPATH`` and report, as one JSON line on stdout, how each pipeline
size compares with the PP=1 run of the same module.

    python -m sglang_support.kimi_check '{"num_layers": 7, "hidden_size": 4,
        "layer_ids": [6, 0, 3, 2], "tokens": [3, 0, 2],
        "runs": [{"pp": 2}, {"pp": 3}, {"pp": 2, "bypass_setter": true}]}'

With ``"harness": true`` the runs go through ``codemods.ppcheck.run_scenarios`` instead of
the forked drive (relay mode: its wire-byte accounting checks what the handoff carries).
``"harness_runs"`` (with ``"harness_timeout"``) adds such harness runs after the forked
drive, in the same process, under ``"harness"`` in the report.
``bypass_setter`` stores the ids on the inner model of every stage instead of calling the
setter (what the forward does once the PP guard is out of the way).
Per run: ``ok`` (aux states and final hidden states equal with torch.equal),
``error`` (a stage raised: the exception text), ``aux_counts`` per microbatch and
``expected_counts`` from PP=1.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def run_with_harness(config: dict) -> dict:
    """The same stages through ``codemods.ppcheck.run_scenarios`` (spawned ranks, the
    scheduler-like loop, PP=1 comparison and wire-byte accounting of the harness)."""
    from codemods.ppcheck import Scenario, run_scenarios
    from sglang_support.kimi_stage import kimi_stage_factory

    # The patch relays captures in the PP handoff: the harness checks that mode's wire
    # bytes.
    mode = "relay"
    scenarios = [
        Scenario(
            name=f"kimi-linear-{mode}",
            world_size=int(run["pp"]),
            mode=mode,
            num_layers=config["num_layers"],
            layer_ids=tuple(config["layer_ids"]),
            tokens=tuple(config["tokens"]),
            hidden=config["hidden_size"],
            dtype="float32",
            extra={
                "construct": bool(config.get("construct", False)),
                "bypass_setter": bool(run.get("bypass_setter", False)),
            },
        )
        for run in config["runs"]
    ]
    results = run_scenarios(
        scenarios, stage_factory=kimi_stage_factory, timeout=float(config.get("timeout", 300))
    )
    return {
        "harness": "codemods.ppcheck",
        "runs": [
            {
                "pp": r.scenario.world_size,
                "ok": r.passed,
                "status": r.status,
                "detail": r.detail,
                "seconds": round(r.seconds, 2),
            }
            for r in results
        ],
    }


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    if config.get("harness"):
        print(json.dumps(run_with_harness(config)))
        return 0
    torch.set_num_threads(1)
    started = time.time()
    import sglang.srt.models.kimi_linear as module  # noqa: F401  (warm import before fork)

    from sglang_support.drive import drive, same_outputs
    from sglang_support.kimi_stage import kimi_stage_factory
    from sglang_support.stages import run_chain

    spec = {k: config[k] for k in ("num_layers", "hidden_size", "layer_ids")}
    spec["construct"] = bool(config.get("construct", False))
    tokens = list(config["tokens"])
    import_s = time.time() - started
    reference = run_chain([kimi_stage_factory(spec, 0, 1, {})], tokens, spec["hidden_size"])
    report = {"module": module.__file__, "import_s": round(import_s, 2), "runs": []}
    for run in config["runs"]:
        pp_size = int(run["pp"])
        bypass = bool(run.get("bypass_setter", False))
        t0 = time.time()
        result = drive(
            kimi_stage_factory,
            dict(spec, bypass_setter=bypass),
            pp_size,
            tokens,
            timeout=float(config.get("timeout", 120)),
        )
        entry = {
            "pp": pp_size,
            "bypass_setter": bypass,
            "seconds": round(time.time() - t0, 2),
            "expected_counts": [len(aux) for _, aux in reference],
        }
        if result.ok:
            same, detail = same_outputs(result.outputs, reference)
            entry.update(ok=same, detail=detail, aux_counts=[len(aux) for _, aux in result.outputs])
        else:
            entry.update(ok=False, error=result.errors(), aux_counts=None)
        report["runs"].append(entry)
    if config.get("harness_runs"):
        report["harness"] = run_with_harness(
            dict(
                config,
                runs=config["harness_runs"],
                timeout=config.get("harness_timeout", config.get("timeout", 300)),
            )
        )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
