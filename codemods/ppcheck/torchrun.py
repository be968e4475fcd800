"""Run the validation matrix of one world size under ``torchrun`` (one GPU per rank).

    torchrun --standalone --nproc-per-node N -m codemods.ppcheck.torchrun --backend nccl

Every rank runs every scenario of world size N; after each one the reports are gathered
on rank 0 (over the gloo metadata group), which judges them like ``validate-pp`` and
prints the table. A rank that hits an unexpected error prints it and exits non-zero, and
torchrun stops the others; wrap the command in ``timeout`` to turn a hang into a failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

from codemods.ppcheck.command import MODES
from codemods.ppcheck.pp_aux_transport import all_gather_objects
from codemods.ppcheck.runner import format_table, judge, summarize
from codemods.ppcheck.scenario import ScenarioResult, build_matrix
from codemods.ppcheck.toy import toy_stage_factory
from codemods.ppcheck.worker import init_channels, run_scenario_on_rank


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--mode", choices=sorted(MODES), default="both")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--select", default=None)
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    channels = init_channels(rank, world, args.backend, None, args.timeout)
    scenarios = build_matrix(world, MODES[args.mode], min_world_size=world, select=args.select)
    results = []
    started = time.monotonic()
    for scenario in scenarios:
        t0 = time.monotonic()
        report, go_on = run_scenario_on_rank(scenario, rank, channels, toy_stage_factory)
        if not go_on:
            print(
                f"rank {rank}: {scenario.label()}: {report.get('status')}\n"
                f"{report.get('trace', report)}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        gathered = all_gather_objects(report, channels.meta)
        if rank == 0:
            passed, detail = judge(scenario, dict(enumerate(gathered)))
            results.append(
                ScenarioResult(
                    scenario, passed, "PASS" if passed else "FAIL", detail, time.monotonic() - t0
                )
            )
    dist.barrier(group=channels.meta)
    dist.destroy_process_group()
    if rank != 0:
        return 0
    print(format_table(results))
    print(
        f"{summarize(results)} in {time.monotonic() - started:.1f}s "
        f"(world size {world}, backend {args.backend}, mode {args.mode})"
    )
    return 0 if results and all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
