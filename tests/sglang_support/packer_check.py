"""Command run in a subprocess under ``env.sglang_env``: drive causal-LM stages whose
decoder stack packs its captures (``packer_stage.py``) of the SGLang tree on
``PYTHONPATH`` as real pipeline stages (``drive.drive``: forked processes, gloo) and
report, as one JSON line on stdout, how each run compares with the PP=1 run.

    python -m sglang_support.packer_check '{"num_layers": 9, "hidden_size": 4,
        "tokens": [3, 0, 2], "runs": [{"model": "deepseek_v2", "hook": "eagle3",
        "layer_ids": [7, 0, 4], "pp": 3}]}'

Per run: ``ok`` (per microbatch the packed aux tensor has the PP=1 type, shape and
values, ``torch.equal``, and so have the final hidden states), ``error`` (a stage raised:
the exception texts), ``shapes`` and ``expected_shapes`` of the packed tensors (``None``
for a microbatch that handed no aux states), ``types``.  ``"drop_aux": true`` removes the
aux entries from every handoff, to show what the last stage does when they are missing.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def _shape(aux):
    return list(aux.shape) if isinstance(aux, torch.Tensor) else None


def compare(got, want) -> tuple[bool, str]:
    """Per microbatch: same container type, shape and values (``torch.equal``)."""
    if len(got) != len(want):
        return False, f"{len(got)} microbatches, expected {len(want)}"
    for mb, ((hidden, aux), (ref_hidden, ref_aux)) in enumerate(zip(got, want, strict=True)):
        if type(aux) is not type(ref_aux):
            return (
                False,
                f"microbatch {mb}: {type(aux).__name__}, expected {type(ref_aux).__name__}",
            )
        if isinstance(ref_aux, torch.Tensor):
            if aux.shape != ref_aux.shape:
                return (
                    False,
                    f"microbatch {mb}: aux {list(aux.shape)}, expected {list(ref_aux.shape)}",
                )
            if not torch.equal(aux, ref_aux):
                return False, f"microbatch {mb}: packed aux states differ"
        elif len(aux) != len(ref_aux):
            return False, f"microbatch {mb}: {len(aux)} aux states, expected {len(ref_aux)}"
        if not torch.equal(hidden, ref_hidden):
            return False, f"microbatch {mb}: final hidden states differ"
    return True, "equal"


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    torch.set_num_threads(1)
    started = time.time()
    import importlib

    for name in sorted({run["model"] for run in config["runs"]}):
        importlib.import_module(f"sglang.srt.models.{name}")  # warm before forking
    from sglang_support.drive import drive
    from sglang_support.packer_stage import packer_stage_factory
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
        }
        reference = run_chain([packer_stage_factory(spec, 0, 1, {})], tokens, spec["hidden_size"])
        factory = (
            dropping_aux(packer_stage_factory) if run.get("drop_aux") else packer_stage_factory
        )
        t0 = time.time()
        result = drive(
            factory, spec, int(run["pp"]), tokens, timeout=float(config.get("timeout", 120))
        )
        entry = dict(run)
        entry.update(
            seconds=round(time.time() - t0, 2),
            expected_shapes=[_shape(aux) for _, aux in reference],
            expected_types=[type(aux).__name__ for _, aux in reference],
        )
        if result.ok:
            same, detail = compare(result.outputs, reference)
            entry.update(
                ok=same,
                detail=detail,
                error=None,
                types=[type(aux).__name__ for _, aux in result.outputs],
                shapes=[_shape(aux) for _, aux in result.outputs],
            )
        else:
            entry.update(ok=False, error=result.errors(), shapes=None)
        report["runs"].append(entry)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
