"""Command run in a subprocess under ``env.sglang_env``: drive stages of real causal-LM
classes of the SGLang tree on ``PYTHONPATH`` (``stages.stage_factory``) as pipeline stages
in forked processes and report, as one JSON line on stdout, how each run compares with the
PP=1 run of the same module.

    python -m sglang_support.stage_check '{"num_layers": 9, "hidden_size": 4,
        "tokens": [3, 0, 2], "runs": [{"model": "llama", "hook": "eagle3",
        "layer_ids": [7, 0, 4], "pp": 3}]}'

Every top-level key but ``runs`` and the ``harness`` ones is part of each run's stage
spec (``model``, ``hook``, ``layer_ids``, ``layers``, ``construct``, ``config``,
``attn_res_block_size``, ...), a run's own keys override them.  Each rank is a
``codemods.ppcheck`` rank (``init_channels``: gloo, its groups; ``run_pipeline``: the
scheduler-like loop, microbatches in flight, handoffs over ``ppcheck.wire``); the parent
gives up after ``timeout`` seconds and kills what is left.

Per run: ``ok`` (per microbatch the aux container has the PP=1 type, and every aux state,
or the packed tensor, and the final hidden states are equal with ``torch.equal``),
``error`` (a stage raised: the exception texts), ``aux_counts`` / ``shapes`` / ``types``
per microbatch and their ``expected_*`` from PP=1.  ``"drop_aux": true`` removes the aux
entry from every handoff, to show what the last stage does when it is missing;
``"bypass_setter": true`` stores the ids on every stage past the hook's PP guard.
``"harness_runs"`` (with ``"harness_timeout"``) adds runs through
``codemods.ppcheck.run_scenarios`` (spawned ranks, relay mode, its PP=1 comparison and
wire-byte accounting), under ``"harness"`` in the report.
"""

from __future__ import annotations

import importlib
import io
import json
import multiprocessing as mp
import queue
import sys
import time
import traceback
from typing import Any

import torch

from codemods.ppcheck import Scenario, run_scenarios
from codemods.ppcheck.pp_aux_transport import AUX_ENTRY
from codemods.ppcheck.runner import free_port
from codemods.ppcheck.worker import init_channels, run_pipeline

#: Keys of the check's config that are no part of a stage spec.
NOT_SPEC = {"runs", "pp", "drop_aux", "timeout", "harness_runs", "harness_timeout"}


def _bytes(value: Any) -> bytes:
    # Plain bytes through the queue: shared-memory tensors would need the rank to live on.
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def dropping_aux(factory):
    """``factory`` whose stages hand on everything but the aux entry."""

    def make(spec, pp_rank, pp_size, transport_kwargs):
        stage = factory(spec, pp_rank, pp_size, transport_kwargs)
        forward = stage.forward

        def without_aux(mb, hidden_in, proxy):
            out = forward(mb, hidden_in, proxy)
            return (
                {k: v for k, v in out.items() if k != AUX_ENTRY} if isinstance(out, dict) else out
            )

        stage.forward = without_aux
        return stage

    return make


def _forked(target, rank, port, results) -> None:
    try:
        torch.set_num_threads(1)
        results.put((rank, "ok", _bytes(target(rank, port))))
    except BaseException:
        results.put((rank, traceback.format_exc(), _bytes(None)))


def fork_ranks(target, world: int, timeout: float) -> dict[int, tuple[str, Any]]:
    """``target(rank, port)`` in one forked process per rank (``port``: a free port for
    the process group); per rank ``("ok", what it returned)`` or ``(what it raised,
    None)``.  After a failure or ``timeout`` seconds without an answer the rest are
    stopped (their peers may be blocked on them) and every process is killed."""
    ctx = mp.get_context("fork")
    results, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_forked, args=(target, r, port, results)) for r in range(world)]
    for proc in procs:
        proc.start()
    got: dict[int, tuple[str, Any]] = {}
    try:
        while len(got) < world:
            try:
                rank, state, data = results.get(timeout=timeout)
            except queue.Empty:
                for rank in set(range(world)) - set(got):
                    got[rank] = (f"no answer within {timeout:.0f} s", None)
                break
            got[rank] = (state, torch.load(io.BytesIO(data), weights_only=False))
            if state != "ok":
                for other in range(world):
                    got.setdefault(other, ("stopped after a peer failed", None))
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    return got


def drive(factory, spec: dict, pp_size: int, timeout: float) -> dict[int, tuple[str, Any]]:
    """Each rank a ``codemods.ppcheck`` rank running its stage; per rank its state and,
    on the last, its ``(hidden, aux)`` per microbatch."""
    ids = spec.get("layer_ids")
    scenario = Scenario(
        name=str(spec.get("model")),
        world_size=pp_size,
        mode="relay",
        num_layers=int(spec["num_layers"]),
        layer_ids=None if ids is None else tuple(ids),
        tokens=tuple(spec["tokens"]),
        hidden=int(spec["hidden_size"]),
    )

    def rank_run(rank, port):
        if pp_size == 1:  # one stage: no handoff, the PP=1 run itself
            return run_chain(factory(spec, 0, 1, {}), spec)
        channels = init_channels(rank, pp_size, "gloo", f"tcp://127.0.0.1:{port}", timeout)
        ranks = list(range(pp_size))
        kwargs = {"group": channels.meta, "direct_group": channels.direct, "ranks": ranks}
        stage = factory(spec, rank, pp_size, kwargs)
        return run_pipeline(scenario, stage, rank, channels).get("results")

    return fork_ranks(rank_run, pp_size, timeout)


def run_chain(stage, spec: dict) -> list:
    """The PP=1 stage's ``(hidden, aux)`` per microbatch."""
    return [stage.forward(mb, stage.make_input(mb), None) for mb in range(len(spec["tokens"]))]


def compare(got, want) -> tuple[bool, str]:
    """Per microbatch: same aux container type, count (or packed shape) and values, and
    the same final hidden states (``torch.equal``)."""
    if len(got) != len(want):
        return False, f"{len(got)} microbatches, expected {len(want)}"
    for mb, ((hidden, aux), (ref_hidden, ref_aux)) in enumerate(zip(got, want, strict=True)):
        if type(aux) is not type(ref_aux):
            return False, f"microbatch {mb}: {type(aux).__name__}, PP=1 {type(ref_aux).__name__}"
        size, ref_size = _shape(aux) or _count(aux), _shape(ref_aux) or _count(ref_aux)
        if size != ref_size:
            return False, f"microbatch {mb}: aux {size}, PP=1 {ref_size}"
        pairs = (
            [(aux, ref_aux)] if isinstance(aux, torch.Tensor) else zip(aux, ref_aux, strict=True)
        )
        for index, (a, b) in enumerate(pairs):
            if not torch.equal(a, b):
                return False, f"microbatch {mb}: aux state {index} differs"
        if not torch.equal(hidden, ref_hidden):
            return False, f"microbatch {mb}: final hidden states differ"
    return True, "equal"


def _shape(aux):
    return list(aux.shape) if isinstance(aux, torch.Tensor) else None


def _count(aux):
    return None if isinstance(aux, torch.Tensor) else len(aux)


def _facts(outputs, expected: bool = False) -> dict:
    prefix = "expected_" if expected else ""
    return {
        "expected_counts" if expected else "aux_counts": [_count(aux) for _, aux in outputs],
        f"{prefix}shapes": [_shape(aux) for _, aux in outputs],
        f"{prefix}types": [type(aux).__name__ for _, aux in outputs],
    }


def run_with_harness(config: dict, runs: list[dict], timeout: float) -> dict:
    """The same stages through ``codemods.ppcheck.run_scenarios`` (relay mode: its
    wire-byte accounting checks what the handoff carries)."""
    from sglang_support.stages import stage_factory

    scenarios = [
        Scenario(
            name=f"{config.get('model', 'kimi_linear')}-relay",
            world_size=int(run["pp"]),
            mode="relay",
            num_layers=config["num_layers"],
            layer_ids=tuple(config["layer_ids"]),
            tokens=tuple(config["tokens"]),
            hidden=config["hidden_size"],
            extra={k: v for k, v in {**config, **run}.items() if k not in NOT_SPEC},
        )
        for run in runs
    ]
    results = run_scenarios(scenarios, stage_factory=stage_factory, timeout=timeout)
    return {
        "harness": "codemods.ppcheck",
        "runs": [
            {"pp": r.scenario.world_size, "ok": r.passed, "status": r.status, "detail": r.detail}
            for r in results
        ],
    }


def main(argv: list[str]) -> int:
    config = json.loads(argv[0])
    torch.set_num_threads(1)
    started = time.time()
    models = {run.get("model", config.get("model", "kimi_linear")) for run in config["runs"]}
    modules = [importlib.import_module(f"sglang.srt.models.{m}") for m in sorted(models)]
    from sglang_support.stages import stage_factory

    report: dict[str, Any] = {"module": modules[0].__file__, "runs": []}
    report["import_s"] = round(time.time() - started, 2)
    references: dict[str, list] = {}
    for run in config["runs"]:
        spec = {k: v for k, v in {**config, **run}.items() if k not in NOT_SPEC}
        spec.setdefault("model", "kimi_linear")
        plain = {k: v for k, v in spec.items() if k != "bypass_setter"}
        key = json.dumps(plain, sort_keys=True)
        if key not in references:
            references[key] = run_chain(stage_factory(plain, 0, 1, {}), plain)
        reference = references[key]
        factory = dropping_aux(stage_factory) if run.get("drop_aux") else stage_factory
        t0 = time.time()
        pp = int(run["pp"])
        ranks = drive(factory, spec, pp, float(config.get("timeout", 120)))
        entry = dict(run, seconds=round(time.time() - t0, 2), **_facts(reference, expected=True))
        if all(state == "ok" for state, _ in ranks.values()):
            same, detail = compare(ranks[pp - 1][1], reference)
            entry.update(ok=same, detail=detail, error=None, **_facts(ranks[pp - 1][1]))
        else:
            errors = [
                f"rank {r}: {state}" for r, (state, _) in sorted(ranks.items()) if state != "ok"
            ]
            entry.update(ok=False, error="\n".join(errors), aux_counts=None, shapes=None)
        report["runs"].append(entry)
    if config.get("harness_runs"):
        timeout = float(config.get("harness_timeout", config.get("timeout", 300)))
        report["harness"] = run_with_harness(config, config["harness_runs"], timeout)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
