"""One rank of a validation run: set up process groups, then run scenarios one by one.

The scheduler loop knows nothing of the model: it asks the stage factory for a stage and
moves handoff dicts between adjacent stages with :mod:`codemods.ppcheck.wire`:

* stage 0 feeds microbatches, keeping up to ``scenario.max_inflight`` in flight (it runs
  ahead of the others), and receives each output back from the last stage;
* middle stages receive a handoff, run, and send the next handoff;
* the last stage runs, keeps the aux states, and sends a small output back to stage 0 on
  the same rank pair that direct mode uses from stage 0.

All sends are asynchronous (``isend``), like a PP scheduler that overlaps communication.
At the end each stage's ``flush()`` completes its own outstanding transfers. The last rank
then runs the same microbatches through the same factory with ``pp_size=1`` and compares
with ``torch.equal``.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from codemods.ppcheck.pp_aux_transport import PP_LAYER_PARTITION_ENV
from codemods.ppcheck.scenario import Scenario
from codemods.ppcheck.toy import default_input, toy_stage_factory
from codemods.ppcheck.wire import Channels, Pending, WireLog, recv_dict, send_dict

Report = dict[str, Any]


def init_channels(
    rank: int, world: int, backend: str, init_method: str | None, timeout: float
) -> Channels:
    """Initialise torch.distributed and create the groups (collective, same order on
    every rank: the direct group first, then the metadata group on NCCL)."""
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if init_method is not None:
        dist.init_process_group(
            backend=backend,
            timeout=timedelta(seconds=timeout),
            init_method=init_method,
            rank=rank,
            world_size=world,
        )
    else:
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    ranks = list(range(world))
    direct = dist.new_group(ranks)
    meta = dist.new_group(ranks, backend="gloo") if backend == "nccl" else dist.group.WORLD
    return Channels(tensors=dist.group.WORLD, meta=meta, direct=direct, device=device)


def _set_partition_env(partition: str | None) -> None:
    if partition is None:
        os.environ.pop(PP_LAYER_PARTITION_ENV, None)
    else:
        os.environ[PP_LAYER_PARTITION_ENV] = partition


def _first_input(stage, spec, mb, device):
    make_input = getattr(stage, "make_input", None)
    return make_input(mb) if make_input is not None else default_input(spec, mb, device)


def run_pipeline(scenario: Scenario, stage, rank: int, channels: Channels) -> Report:
    """The scheduler-like loop for one scenario, on one rank."""
    world = scenario.world_size
    microbatches = len(scenario.tokens)
    spec = scenario.spec()
    log, pending = WireLog(), Pending()
    report: Report = {}
    if rank == 0:
        inflight: deque[int] = deque()
        outputs_seen: list[int] = []
        max_inflight = 0

        def receive_output():
            expected = inflight.popleft()
            out = recv_dict(world - 1, channels)
            outputs_seen.append(out["mb"])
            if out["mb"] != expected:
                raise RuntimeError(f"output of microbatch {out['mb']}, expected {expected}")

        step_times = []
        for mb in range(microbatches):
            while len(inflight) >= scenario.max_inflight:
                receive_output()
            started = time.perf_counter()
            handoff = stage.forward(mb, _first_input(stage, spec, mb, channels.device), None)
            send_dict(handoff, 1, channels, pending, log)
            inflight.append(mb)
            max_inflight = max(max_inflight, len(inflight))
            pending.poll()
            if scenario.max_inflight == 1:
                receive_output()
                step_times.append(time.perf_counter() - started)
        while inflight:
            receive_output()
        report.update(outputs=outputs_seen, max_inflight=max_inflight, step_times=step_times)
    elif rank < world - 1:
        for mb in range(microbatches):
            proxy = recv_dict(rank - 1, channels)
            send_dict(stage.forward(mb, None, proxy), rank + 1, channels, pending, log)
            pending.poll()
    else:
        results = []
        for mb in range(microbatches):
            proxy = recv_dict(rank - 1, channels)
            hidden, aux = stage.forward(mb, None, proxy)
            results.append((hidden, aux))
            summary = {"mb": mb, "out": hidden[:, :1].contiguous()}
            send_dict(summary, 0, channels, pending, log, channel="output")
            pending.poll()
        report["results"] = results
    flush = getattr(stage, "flush", None)
    if flush is not None:
        flush()
    pending.wait()
    dist.barrier(group=channels.meta)  # nobody moves on while a peer still transfers
    report["wire"] = log.summary("handoff")
    transport = getattr(stage, "transport", None)
    report["direct"] = dict(transport.stats) if transport is not None else {}
    return report


def compare_with_single_stage(scenario: Scenario, factory, results, device) -> tuple[bool, str]:
    """Run the same microbatches with ``pp_size=1`` and compare with ``torch.equal``."""
    spec = dict(scenario.spec(), fault=None)  # the reference never runs a broken transport
    stage = factory(spec, 0, 1, {"mode": scenario.mode, "device": device})
    expected_count = len(scenario.layer_ids or ())
    for mb, (hidden, aux) in enumerate(results):
        ref_hidden, ref_aux = stage.forward(mb, _first_input(stage, spec, mb, device), None)
        if len(aux) != len(ref_aux) or len(aux) != expected_count:
            return False, f"mb {mb}: {len(aux)} aux states, PP=1 gave {len(ref_aux)}"
        for index, (got, want) in enumerate(zip(aux, ref_aux, strict=True)):
            if got.dtype != want.dtype or not torch.equal(got.cpu(), want.cpu()):
                layer = scenario.layer_ids[index] if scenario.layer_ids else index
                return False, f"mb {mb}: aux state {index} (layer {layer}) differs from PP=1"
        if not torch.equal(hidden.cpu(), ref_hidden.cpu()):
            return False, f"mb {mb}: final hidden states differ from PP=1"
    return True, ""


def run_scenario_on_rank(
    scenario: Scenario, rank: int, channels: Channels, factory: Callable
) -> tuple[Report, bool]:
    """Run one scenario; returns the report and whether this rank can go on."""
    started = time.monotonic()
    _set_partition_env(scenario.partition)
    kwargs = {
        "mode": scenario.mode,
        "group": channels.meta,
        "direct_group": channels.direct,
        "ranks": list(range(scenario.world_size)),
        "device": channels.device,
        "feature": scenario.feature,
    }
    try:
        stage = factory(scenario.spec(), rank, scenario.world_size, kwargs)
    except Exception as err:  # reported, judged by the parent
        report: Report = {
            "status": "setup-error",
            "type": type(err).__name__,
            "message": str(err),
            "elapsed": time.monotonic() - started,
            "trace": traceback.format_exc(),
        }
        # every rank raised after a completed collective: the groups stay usable
        return report, isinstance(err, ValueError) and scenario.expect == "error"
    if scenario.expect == "error":
        return {"status": "no-error", "elapsed": time.monotonic() - started}, False
    try:
        report = run_pipeline(scenario, stage, rank, channels)
        if rank == scenario.world_size - 1:
            results = report.pop("results")
            report["features"] = [len(aux) for _, aux in results]
            check = getattr(stage, "check", None)
            if check is not None:  # the factory's own judgement of what came out
                report.update(check(results))
            if scenario.verify:
                equal, why = compare_with_single_stage(scenario, factory, results, channels.device)
                report.update(equal=equal, why=why)
    except Exception as err:
        return {
            "status": "run-error",
            "type": type(err).__name__,
            "message": str(err),
            "elapsed": time.monotonic() - started,
            "trace": traceback.format_exc(),
        }, False
    report.update(status="ok", elapsed=time.monotonic() - started)
    return report, True


def spawn_worker(
    rank: int,
    world: int,
    backend: str,
    init_method: str,
    timeout: float,
    scenarios: list[Scenario],
    factory: Callable | None,
    queue,
) -> None:
    """Entry point of a spawned rank: reports ``(rank, index, report)`` on ``queue``
    (index -1 = ready) and stops at the first report after which it cannot go on."""
    try:
        os.setpgrp()
    except OSError:
        pass
    factory = factory or toy_stage_factory
    if os.environ.get("AUXCAP_PPCHECK_DUMP"):
        import faulthandler

        faulthandler.dump_traceback_later(float(os.environ["AUXCAP_PPCHECK_DUMP"]))
    try:
        torch.set_num_threads(1)
        # collectives outlive the parent's per-scenario deadline, so a stall is a HANG
        channels = init_channels(rank, world, backend, init_method, timeout + 30)
    except Exception as err:
        queue.put((rank, -1, {"status": "init-error", "message": f"{type(err).__name__}: {err}"}))
        return
    queue.put((rank, -1, {"status": "ready"}))
    for index, scenario in enumerate(scenarios):
        report, go_on = run_scenario_on_rank(scenario, rank, channels, factory)
        queue.put((rank, index, report))
        if not go_on:
            # peers may be blocked on this rank: the parent ends the launch
            queue.close()
            queue.join_thread()
            os._exit(0)
    try:
        dist.barrier(group=channels.meta)
        dist.destroy_process_group()
    except Exception:
        pass
