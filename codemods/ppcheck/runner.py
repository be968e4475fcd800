"""Spawn the ranks of a validation run, watch them with timeouts, judge every scenario.

Scenarios of one world size share one launch (one set of processes and process groups),
run back to back. A scenario that goes quiet for ``timeout`` seconds is a HANG: every
process of the launch is killed (its whole process group) and the scenarios after it run
in a fresh launch. An unexpected error does the same, since peers may be blocked on it.
"""

from __future__ import annotations

import os
import queue as queue_module
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch.multiprocessing as mp

from codemods.ppcheck.scenario import Scenario, ScenarioResult, expected_wire
from codemods.ppcheck.worker import spawn_worker

HANDSHAKE_DEADLINE = 30.0
STARTUP_ALLOWANCE = 120.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---------------------------------------------------------------------- judging
def judge(scenario: Scenario, reports: dict[int, dict[str, Any]]) -> tuple[bool, str]:
    """Whether the reports of every rank show what the scenario expects, and why not."""
    world = scenario.world_size
    if scenario.expect == "error":
        bad = [
            f"rank {r}: {rep.get('status')}"
            for r, rep in sorted(reports.items())
            if rep.get("status") != "setup-error" or rep.get("type") != "ValueError"
        ]
        if bad:
            return False, "expected ValueError on every rank; " + ", ".join(bad)
        slow = [r for r, rep in reports.items() if rep["elapsed"] > HANDSHAKE_DEADLINE]
        if slow:
            return False, f"ranks {slow} took over {HANDSHAKE_DEADLINE:.0f}s to fail"
        slowest = max(rep["elapsed"] for rep in reports.values())
        return True, f"ValueError on all ranks in {slowest:.2f}s: {reports[0]['message'][:60]}"
    for rank, rep in sorted(reports.items()):
        if rep.get("status") != "ok":
            message = rep.get("message", "")
            return False, f"rank {rank} {rep.get('status')}: {rep.get('type', '')} {message}"
    last = reports[world - 1]
    if scenario.verify and not last.get("equal"):
        return False, last.get("why") or "aux states differ from PP=1"
    first = reports[0]
    if first["outputs"] != list(range(len(scenario.tokens))):
        return False, f"outputs came back in order {first['outputs']}"
    try:
        expected = expected_wire(scenario)
    except ValueError as err:  # ids the harness's plan refuses (a factory's own id scheme)
        return False, f"no analytic wire bytes for these layer ids: {err}"
    measured_aux = sum(rep["wire"]["aux_bytes"] for rep in reports.values())
    measured_base = sum(rep["wire"]["base_bytes"] for rep in reports.values())
    sent_direct = sum(rep["direct"].get("direct_send_bytes", 0) for rep in reports.values())
    got_direct = last["direct"].get("direct_recv_bytes", 0)
    sends = sum(rep["direct"].get("direct_sends", 0) for rep in reports.values())
    receives = last["direct"].get("direct_recvs", 0)
    for what, got, want in (
        ("handoff aux bytes", measured_aux, expected["aux_bytes"]),
        ("handoff base bytes", measured_base, expected["base_bytes"]),
        ("direct bytes sent", sent_direct, expected["direct_bytes"]),
        ("direct bytes received", got_direct, expected["direct_bytes"]),
        ("direct messages sent", sends, expected["direct_messages"]),
        ("direct messages received", receives, expected["direct_messages"]),
    ):
        if got != want:
            return False, f"{what}: measured {got}, analytic {want}"
    for stage in range(world - 1):
        want = expected["keys"][stage]
        for keys in reports[stage]["wire"]["keys"]:
            if keys != want:
                return False, f"stage {stage} sent keys {keys}, expected {want}"
    ahead = min(scenario.max_inflight, len(scenario.tokens))
    if first["max_inflight"] != ahead:
        return False, f"stage 0 had {first['max_inflight']} in flight, expected {ahead}"
    return True, (f"aux {measured_aux}B handoff + {sent_direct}B direct, {ahead} in flight")


# ---------------------------------------------------------------------- launches
def _can_go_on(scenario: Scenario, report: dict[str, Any]) -> bool:
    """Whether the launch stays usable after this rank's report."""
    if report.get("status") == "ok":
        return True
    return (
        scenario.expect == "error"
        and report.get("status") == "setup-error"
        and report.get("type") == "ValueError"
    )


def _kill(processes) -> None:
    for process in processes:
        if process.pid is None:
            continue
        for target in (
            lambda pid=process.pid: os.killpg(pid, signal.SIGKILL),
            lambda pid=process.pid: os.kill(pid, signal.SIGKILL),
        ):
            try:
                target()
            except (ProcessLookupError, PermissionError, OSError):
                pass
    for process in processes:
        process.join(timeout=10)


class LaunchFailed(RuntimeError):
    """The ranks of a launch could not start or join the process group."""


def _launch(
    world: int,
    scenarios: list[Scenario],
    backend: str,
    timeout: float,
    factory: Callable | None,
    on_result: Callable[[ScenarioResult], None],
    start_method: str = "spawn",
) -> int:
    """Run ``scenarios`` in one launch; returns how many of them got a result."""
    ctx: Any = mp.get_context(start_method)
    results_queue = ctx.Queue()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    processes = [
        ctx.Process(
            target=spawn_worker,
            args=(rank, world, backend, init_method, timeout, scenarios, factory, results_queue),
            daemon=True,
        )
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    ready: set[int] = set()
    reports: dict[int, dict[int, dict[str, Any]]] = {}
    index = 0
    deadline = time.monotonic() + STARTUP_ALLOWANCE + timeout
    scenario_started = time.monotonic()
    done = 0

    def finish(status: str, detail: str) -> None:
        nonlocal done
        if len(ready) < world and not reports:  # the launch itself failed: nothing ran
            raise LaunchFailed(detail)
        scenario = scenarios[index]
        on_result(
            ScenarioResult(
                scenario,
                False,
                status,
                detail,
                time.monotonic() - scenario_started,
                reports.get(index, {}),
            )
        )
        done += 1

    try:
        while index < len(scenarios):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                what = "start-up" if len(ready) < world else f"{timeout:.0f}s"
                finish("HANG", f"no progress within {what}; killed the launch")
                return done
            try:
                rank, at, report = results_queue.get(timeout=min(remaining, 1.0))
            except queue_module.Empty:
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    finish("ERROR", f"rank process died (exit code {dead[0].exitcode})")
                    return done
                continue
            if at == -1:
                if report["status"] != "ready":
                    finish("ERROR", f"rank {rank} {report['status']}: {report['message']}")
                    return done
                ready.add(rank)
                if len(ready) == world:
                    deadline = time.monotonic() + timeout
                    scenario_started = time.monotonic()
                continue
            reports.setdefault(at, {})[rank] = report
            while index < len(scenarios) and len(reports.get(index, {})) == world:
                scenario = scenarios[index]
                passed, detail = judge(scenario, reports[index])
                on_result(
                    ScenarioResult(
                        scenario,
                        passed,
                        "PASS" if passed else "FAIL",
                        detail,
                        time.monotonic() - scenario_started,
                        reports[index],
                    )
                )
                done += 1
                can_go_on = all(_can_go_on(scenario, rep) for rep in reports[index].values())
                index += 1
                deadline = time.monotonic() + timeout
                scenario_started = time.monotonic()
                if not can_go_on:
                    return done
            for rank, rep in sorted(reports.get(index, {}).items()):
                if not _can_go_on(scenarios[index], rep):
                    # its peers may be blocked on it: judge now and end the launch
                    finish(
                        "FAIL",
                        f"rank {rank} {rep.get('status')}: "
                        f"{rep.get('type', '')} {rep.get('message', '')}".strip(),
                    )
                    return done
        for process in processes:
            process.join(timeout=30)
        return done
    finally:
        _kill(processes)
        results_queue.close()


def run_scenarios(
    scenarios: Sequence[Scenario],
    *,
    backend: str = "gloo",
    timeout: float = 60.0,
    stage_factory: Callable | None = None,
    on_result: Callable[[ScenarioResult], None] | None = None,
    start_method: str = "spawn",
) -> list[ScenarioResult]:
    """Run every scenario (grouped by world size, one launch per group when all goes
    well); returns one result per scenario, in the order given.  ``start_method="fork"``
    starts the ranks from this process's imports (a factory whose model code is already
    imported here, which it need not pickle)."""
    results: dict[int, ScenarioResult] = {}
    by_world: dict[int, list[int]] = {}
    for position, scenario in enumerate(scenarios):
        by_world.setdefault(scenario.world_size, []).append(position)
    for world, positions in sorted(by_world.items()):
        todo = list(positions)
        while todo:
            batch = [scenarios[p] for p in todo]
            got: list[ScenarioResult] = []

            # Called only within this iteration (by _launch and just below).
            def collect(result: ScenarioResult) -> None:
                results[todo[len(got)]] = result  # noqa: B023
                got.append(result)  # noqa: B023
                if on_result is not None:
                    on_result(result)

            try:
                count = _launch(
                    world, batch, backend, timeout, stage_factory, collect, start_method
                )
            except LaunchFailed as err:
                for p in todo[len(got) :]:
                    collect(
                        ScenarioResult(
                            scenarios[p], False, "ERROR", f"not run, launch failed: {err}", 0.0
                        )
                    )
                break
            todo = todo[count:]
    return [results[p] for p in range(len(scenarios))]


def run_scenario(
    scenario: Scenario,
    stage_factory: Callable | None = None,
    backend: str = "gloo",
    timeout: float = 60.0,
) -> ScenarioResult:
    """Run one scenario in its own launch."""
    return run_scenarios([scenario], backend=backend, timeout=timeout, stage_factory=stage_factory)[
        0
    ]


# ------------------------------------------------------------------------ report
def format_table(results: Iterable[ScenarioResult]) -> str:
    rows = [("P", "mode", "scenario", "layers", "tokens", "dtype", "result", "ms", "detail")]
    for r in results:
        s = r.scenario
        layers = f"{s.num_layers}" + ("" if s.layer_ids is None else f" ids {list(s.layer_ids)}")
        tokens = ",".join(str(t) for t in sorted(set(s.tokens)))
        rows.append(
            (
                str(s.world_size),
                s.mode,
                s.name,
                layers,
                tokens,
                s.dtype,
                r.status,
                f"{r.seconds * 1000:.0f}",
                r.detail,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join(cells + [row[-1]]).rstrip())
    return "\n".join(lines)


def summarize(results: Sequence[ScenarioResult]) -> str:
    passed = sum(r.passed for r in results)
    return f"{passed}/{len(results)} scenarios passed"
