"""Command run in a subprocess under ``env.sglang_env``: drive causal-LM stages of the
callback-at-layer-entry models (``entry_stage.py``) of the SGLang tree on ``PYTHONPATH``
as real pipeline stages (``drive.drive``: forked processes, gloo) and report, as one JSON
line on stdout, how each run compares with the PP=1 run of the same module.

    python -m sglang_support.entry_check '{"num_layers": 9, "hidden_size": 4,
        "tokens": [3, 0, 2], "runs": [{"model": "llama", "hook": "eagle3",
        "layer_ids": [7, 0, 4], "pp": 3}]}'

Per run: ``ok`` (every aux state and the final hidden states equal with ``torch.equal``,
and the same container type as PP=1), ``error`` (a stage raised: the exception texts),
``aux_counts`` per microbatch, ``expected_counts`` and the container types.  A run's
``"config"`` sets model config fields (e.g. ``{"mhc": true}``).  A run with
``"drop_aux": true`` removes the aux entry from every handoff between stages, to show
what the last stage does when they are missing.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    torch.set_num_threads(1)
    started = time.time()
    import importlib

    models = sorted({run["model"] for run in config["runs"]})
    for name in models:  # warm imports before forking
        importlib.import_module(f"sglang.srt.models.{name}")
    from sglang_support.drive import drive, same_outputs
    from sglang_support.entry_stage import entry_stage_factory
    from sglang_support.stages import dropping_aux, run_chain

    tokens = list(config["tokens"])
    report = {"import_s": round(time.time() - started, 2), "runs": []}
    for run in config["runs"]:
        spec = {
            "model": run["model"],
            "hook": run["hook"],
            "layer_ids": run["layer_ids"],
            "num_layers": config["num_layers"],
            "hidden_size": config["hidden_size"],
            "config": run.get("config", {}),
        }
        reference = run_chain([entry_stage_factory(spec, 0, 1, {})], tokens, spec["hidden_size"])
        factory = dropping_aux(entry_stage_factory) if run.get("drop_aux") else entry_stage_factory
        t0 = time.time()
        result = drive(
            factory, spec, int(run["pp"]), tokens, timeout=float(config.get("timeout", 120))
        )
        entry = dict(run)
        entry.update(
            seconds=round(time.time() - t0, 2),
            expected_counts=[len(aux) for _, aux in reference],
            expected_types=[type(aux).__name__ for _, aux in reference],
        )
        if result.ok:
            same, detail = same_outputs(result.outputs, reference)
            types = [type(aux).__name__ for _, aux in result.outputs]
            if same and types != entry["expected_types"]:
                same, detail = False, f"containers {types}"
            entry.update(
                ok=same,
                detail=detail,
                error=None,
                types=types,
                aux_counts=[len(aux) for _, aux in result.outputs],
            )
        else:
            entry.update(ok=False, error=result.errors(), aux_counts=None)
        report["runs"].append(entry)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
