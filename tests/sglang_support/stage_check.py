"""Command run in a subprocess under ``env.sglang_env``: drive stages of real causal-LM
classes of the SGLang tree on ``PYTHONPATH`` (``stages.stage_factory``) as pipeline stages
in forked processes and report, as one JSON line on stdout, how each run compares with the
PP=1 run of the same module.

    python -m sglang_support.stage_check '{"num_layers": 9, "hidden_size": 4,
        "tokens": [3, 0, 2], "runs": [{"model": "llama", "hook": "eagle3",
        "layer_ids": [7, 0, 4], "pp": 3}]}'

Every top-level key but ``runs`` and the ``harness`` ones is part of each run's stage
spec (``model``, ``hook``, ``layer_ids``, ``layers``, ``construct``, ``config``,
``attn_res_block_size``, ...), a run's own keys override them.  Each run is one
``codemods.ppcheck.run_scenarios`` launch with ranks forked from this process (gloo, the
scheduler-like loop, microbatches in flight, handoffs over ``ppcheck.wire``), the last
stage judged by its ``check`` against PP=1; a run quiet for ``timeout`` seconds is killed.

Per run: ``ok`` (per microbatch the aux container has the PP=1 type, and every aux state,
or the packed tensor, and the final hidden states are equal with ``torch.equal``),
``error`` (a stage raised: the exception texts), ``aux_counts`` / ``shapes`` / ``types``
per microbatch and their ``expected_*`` from PP=1.  ``"drop_aux": true`` removes the aux
entry from every handoff, to show what the last stage does when it is missing;
``"bypass_setter": true`` stores the ids on every stage past the hook's PP guard.
``"harness_runs"`` (with ``"harness_timeout"``) adds runs through
``codemods.ppcheck.run_scenarios`` (ranks forked from this process's imports, relay
mode, its PP=1 comparison and wire-byte accounting), under ``"harness"`` in the report.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from typing import Any

import torch

from codemods.ppcheck import Scenario, run_scenarios
from codemods.ppcheck.pp_aux_transport import AUX_ENTRY

#: Keys of the check's config that are no part of a stage spec.
NOT_SPEC = {"runs", "pp", "drop_aux", "timeout", "harness_runs", "harness_timeout"}


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


def judged(result, reference) -> dict:
    """The last stage's outcome set against the PP=1 ``reference`` (:func:`compare`) and
    what it handed on (``aux_counts``, ``shapes``, ``types``)."""
    same, detail = compare(result, reference)
    return dict(ok=same, detail=detail, error=None, **_facts(result))


def spec_of(config: dict, run: dict) -> dict:
    """The stage spec of ``run`` (see the module text)."""
    spec = {k: v for k, v in {**config, **run}.items() if k not in NOT_SPEC}
    return {"model": "kimi_linear", **spec}


def scenario_of(spec: dict, pp_size: int, **options: Any) -> Scenario:
    """The ``codemods.ppcheck`` relay scenario that runs ``spec`` on ``pp_size`` stages."""
    ids = spec.get("layer_ids")
    return Scenario(
        name=f"{spec['model']}-relay",
        world_size=pp_size,
        mode="relay",
        num_layers=int(spec["num_layers"]),
        layer_ids=None if ids is None else tuple(ids),
        tokens=tuple(spec["tokens"]),
        hidden=int(spec["hidden_size"]),
        extra=spec,
        **options,
    )


def _failed(errors: list[str]) -> dict:
    return dict(ok=False, error="\n".join(errors), aux_counts=None, shapes=None)


def drive(factory, spec: dict, pp_size: int, timeout: float, reference: list) -> dict:
    """Each rank a ``codemods.ppcheck`` rank running its stage (``run_scenarios``, forked
    from this process's imports); the last stage judged against ``reference``."""
    if pp_size == 1:  # one stage: no handoff, the PP=1 run itself
        try:
            return judged(run_chain(factory(spec, 0, 1, {}), spec), reference)
        except Exception:
            return _failed([f"rank 0: {traceback.format_exc()}"])

    def with_check(spec, pp_rank, size, transport_kwargs):
        stage = factory(spec, pp_rank, size, transport_kwargs)
        stage.check = lambda results: judged(results, reference)
        return stage

    scenario = scenario_of(spec, pp_size, verify=False)
    (result,) = run_scenarios(
        [scenario], stage_factory=with_check, timeout=timeout, start_method="fork"
    )
    reports = result.reports
    errors = [
        f"rank {rank}: {rep.get('trace') or rep.get('message')}"
        for rank, rep in sorted(reports.items())
        if rep.get("status") != "ok"
    ]
    if errors or "ok" not in reports.get(pp_size - 1, {}):
        return _failed(errors or [f"{result.status}: {result.detail}"])
    last = reports[pp_size - 1]
    return {key: last[key] for key in ("ok", "detail", "error", *_facts([]))}


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

    scenarios = [scenario_of(spec_of(config, run), int(run["pp"])) for run in runs]
    results = run_scenarios(
        scenarios, stage_factory=stage_factory, timeout=timeout, start_method="fork"
    )
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
        spec = spec_of(config, run)
        plain = {k: v for k, v in spec.items() if k != "bypass_setter"}
        key = json.dumps(plain, sort_keys=True)
        if key not in references:
            references[key] = run_chain(stage_factory(plain, 0, 1, {}), plain)
        reference = references[key]
        factory = dropping_aux(stage_factory) if run.get("drop_aux") else stage_factory
        t0 = time.time()
        outcome = drive(factory, spec, int(run["pp"]), float(config.get("timeout", 120)), reference)
        entry = dict(run, seconds=round(time.time() - t0, 2), **_facts(reference, expected=True))
        entry.update(outcome)
        report["runs"].append(entry)
    if config.get("harness_runs"):
        timeout = float(config.get("harness_timeout", config.get("timeout", 300)))
        report["harness"] = run_with_harness(config, config["harness_runs"], timeout)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
