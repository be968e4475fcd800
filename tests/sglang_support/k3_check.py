"""Command run in a subprocess under ``env.sglang_env``: drive Kimi-K3 stages of the SGLang
tree on ``PYTHONPATH`` (``k3_stage.py``) across forked gloo processes and report, as one JSON
line on stdout, how each pipeline size compares with the PP=1 run of the same module.

    python -m sglang_support.k3_check '{"num_layers": 7, "hidden_size": 4,
        "layer_ids": [6, 0, 2, 3, 1], "tokens": [3, 0, 2],
        "runs": [{"pp": 2, "attn_res_block_size": 2}, {"pp": 3}]}'

Per run: ``ok`` (aux states and final hidden states equal with torch.equal), ``error``
(a stage raised: the exception text), ``aux_counts`` per microbatch and ``expected_counts``
from PP=1 with the same ``attn_res_block_size``.
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
    import sglang.srt.models.kimi_k3 as module  # warm import before fork

    from sglang_support.drive import drive, same_outputs
    from sglang_support.k3_stage import k3_stage_factory
    from sglang_support.stages import run_chain

    tokens = list(config["tokens"])
    report = {"module": module.__file__, "import_s": round(time.time() - started, 2), "runs": []}
    references: dict = {}
    for run in config["runs"]:
        spec = {k: config[k] for k in ("num_layers", "hidden_size", "layer_ids")}
        spec["attn_res_block_size"] = run.get("attn_res_block_size")
        key = spec["attn_res_block_size"]
        if key not in references:
            references[key] = run_chain(
                [k3_stage_factory(spec, 0, 1, {})], tokens, spec["hidden_size"]
            )
        reference = references[key]
        spec["bypass_setter"] = bool(run.get("bypass_setter", False))
        t0 = time.time()
        result = drive(
            k3_stage_factory,
            spec,
            int(run["pp"]),
            tokens,
            timeout=float(config.get("timeout", 120)),
        )
        entry = dict(
            run,
            seconds=round(time.time() - t0, 2),
            expected_counts=[len(aux) for _, aux in reference],
        )
        if result.ok:
            same, detail = same_outputs(result.outputs, reference)
            entry.update(ok=same, detail=detail, aux_counts=[len(aux) for _, aux in result.outputs])
        else:
            entry.update(ok=False, error=result.errors(), aux_counts=None)
        report["runs"].append(entry)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
