"""Aux hidden-state capture under pipeline parallelism, on CPU with real processes.

For every model of the PP aux-capture family (``FAMILY``), each PP stage is built
through its real ``__init__`` with a tiny config, in SGLang's parallel state for the
stage, then given tiny stand-in decoder layers (no attention kernels) and weights
filled by parameter name; the real capture hook is called on every rank, and the real
causal-LM ``forward`` runs on 2 and 3 gloo processes; the ``PPProxyTensors`` move
between stages as the scheduler moves them.  The last stage's aux hidden states must
equal (``torch.equal``) those of a single-stage run of the same model.

All models run in one set of worker processes per PP size, forked from a server that
has imported SGLang once (``stage_processes``); the single-stage model is built once
per case.  Run directly (``python test_pp_aux_capture_family.py``) or with pytest.
GPU-only packages SGLang imports (sgl_kernel, flashinfer, ...) are stood in for where
they do not import (``stub_gpu_only_packages``, ``sglang.test``), so it runs on a CPU
machine.
"""

import argparse
import json
import os
import sys
import tempfile
import traceback
import unittest

import torch
import torch.distributed as dist

from sglang.test.pp_aux_capture_family_models import (
    BATCHES,
    LAYER_IDS,
    OP_TIMEOUT_S,
    WORKER_TIMEOUT_S,
    aux_list,
    build_model,
    call_hook,
    free_port,
    init_parallel,
    reference_aux,
    reference_model,
    run_forward,
    set_pp_group,
    stage_processes,
    stub_gpu_only_packages,
)

# GPU-only packages SGLang imports (sgl_kernel, flashinfer, ...) are stood in for
# where they do not import, before the models are.
stub_gpu_only_packages()
# CPU: DeepSeek-V4 keeps its wo_a projection unquantized instead of asking for the FP8
# GEMM's weight scales (read when sglang.srt.models.deepseek_v4 is imported).
os.environ.setdefault("SGLANG_OPT_FP8_WO_A_GEMM", "0")

from sglang.test.ci.ci_register import register_cpu_ci  # noqa: E402
from sglang.test.test_utils import CustomTestCase  # noqa: E402

register_cpu_ci(est_time=300, suite="base-a-test-cpu")

# module, causal-LM class, decoder-stack class, capture hooks
FAMILY = [
    # @@FAMILY_CASES@@
]

# ----------------------------------------------------------- PP handoff (p2p)


def _send_dict(tensors, dst, error=None):
    """Send a handoff dict (metadata first, then tensors), or only an error marker."""
    tensors = {} if error is not None else tensors
    meta = {
        k: (tuple(v.shape), str(v.dtype)) for k, v in tensors.items() if v is not None
    }
    none_keys = [k for k, v in tensors.items() if v is None]
    dist.send_object_list([(meta, none_keys, error)], dst=dst)
    for key in sorted(meta):
        dist.send(tensors[key].contiguous(), dst=dst)


def _recv_dict(src):
    """(tensors, error) from the previous stage."""
    holder = [None]
    dist.recv_object_list(holder, src=src)
    meta, none_keys, error = holder[0]
    tensors = {}
    for key in sorted(meta):
        shape, dtype = meta[key]
        buffer = torch.empty(shape, dtype=getattr(torch, dtype.split(".")[-1]))
        dist.recv(buffer, src=src)
        tensors[key] = buffer
    tensors.update({key: None for key in none_keys})
    return tensors, error


def _describe(error):
    return f"{type(error).__name__}: {error}"


def _check_proxy_width(model, rank, tokens, proxy):
    """The width the stage reports for its CUDA-graph aux buffer is that of the entry
    it receives (0 without one); an empty microbatch, which some models hand on
    without captures, is not checked."""
    from sglang.srt.layers.aux_hidden_states import pp_aux_proxy_hidden_size

    if rank == 0 or tokens == 0:
        return
    entry = (proxy or {}).get("aux_hidden_states")
    received = 0 if entry is None else entry.shape[-1]
    reported = pp_aux_proxy_hidden_size(model)
    if reported != received:
        raise AssertionError(
            f"stage {rank} sizes its aux entry {reported} wide but receives {received}"
        )


def _run_case(case, hook, layer_ids, batches, rank, size, group):
    """Runs one case on this rank, a batch of each token count of ``batches``; the last rank's result holds its comparison.

    Every rank does every receive and send of every batch, also after an error (an
    error travels downstream as a marker), so a failing model never leaves a handoff
    in flight for the next case.
    """
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    result = {"equal": True, "reference": [], "pipelined": [], "error": None}
    model = single = None
    try:
        model = build_model(case, rank, size, group)
        call_hook(model, hook, layer_ids)
    except Exception as error:
        result["error"] = _describe(error)
        result["traceback"] = traceback.format_exc()[-4000:]
    for tokens in batches:
        proxy, upstream_error = _recv_dict(rank - 1) if rank > 0 else (None, None)
        error = result["error"] or upstream_error
        output = None
        if error is None:
            try:
                set_pp_group(model.pp_group)
                _check_proxy_width(model, rank, tokens, proxy)
                output = run_forward(model, tokens, proxy)
                if rank < size - 1 and not isinstance(output, PPProxyTensors):
                    raise TypeError(f"stage {rank} returned {type(output).__name__}")
            except Exception as exc:
                error = _describe(exc)
                result["traceback"] = traceback.format_exc()[-4000:]
        if error is not None:
            result["error"] = result["error"] or error
        if rank < size - 1:
            _send_dict(output.tensors if error is None else {}, rank + 1, error)
            continue
        if error is not None:
            result["equal"] = False
            continue
        pipelined = aux_list(model, output.aux_hidden_states)
        try:
            if single is None:  # the PP=1 model, built once for every batch
                single = reference_model(case, hook, layer_ids)
            reference = reference_aux(single, tokens)
        except Exception as exc:
            result.update(equal=False, error=f"PP=1 reference: {_describe(exc)}")
            continue
        result["reference"].append(len(reference))
        result["pipelined"].append(len(pipelined))
        result["equal"] &= len(reference) == len(pipelined) and all(
            torch.equal(a, b) for a, b in zip(reference, pipelined)
        )
    return result


def _worker(rank, size, port, jobs, batches, out_dir):
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    # Per operation: a stage may wait while the last one runs its PP=1 reference.
    init_parallel(rank, size, port, timeout=OP_TIMEOUT_S)
    # The stages are the whole (gloo) world: the stand-in PP group is the world group.
    group = dist.group.WORLD
    path = os.path.join(out_dir, f"rank{rank}.jsonl")
    for case, hook, layer_ids in jobs:
        entry = {"model": case[0], "hook": hook, "layer_ids": layer_ids, "pp": size}
        with open(path, "a") as handle:  # what this rank is on, should it never return
            handle.write(json.dumps(dict(entry, started=True)) + "\n")
        entry.update(_run_case(case, hook, layer_ids, batches, rank, size, group))
        statuses = [None] * size
        dist.all_gather_object(statuses, entry["error"])
        entry["errors"] = statuses
        with open(path, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
    with open(path, "a") as handle:
        handle.write(json.dumps({"done": True}) + "\n")
    # Every rank has finished every case.  Leave without tearing the groups down one
    # rank at a time: a peer that closes its connections first can abort gloo's
    # teardown.
    dist.barrier()
    os._exit(0)


def run_family(pp_size, jobs, batches=BATCHES, timeout=WORKER_TIMEOUT_S):
    """Run ``jobs`` ((case, hook, layer ids), ...) on ``pp_size`` processes, each
    with a microbatch of every token count of ``batches``; returns the last rank's
    results."""
    models = {f"sglang.srt.models.{case[0]}" for case, _, _ in jobs}
    context = stage_processes(_worker.__module__, *sorted(models))
    with tempfile.TemporaryDirectory() as out_dir:
        port = free_port()
        workers = [
            context.Process(
                target=_worker, args=(r, pp_size, port, jobs, batches, out_dir)
            )
            for r in range(pp_size)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        records = {}
        for rank in range(pp_size):
            path = os.path.join(out_dir, f"rank{rank}.jsonl")
            if os.path.exists(path):
                with open(path) as handle:
                    records[rank] = [json.loads(line) for line in handle]
        codes = [worker.exitcode for worker in workers]
        # A rank that wrote its "done" line finished every case; how its process
        # ended after that does not change the results.
        finished = [
            bool(records.get(r)) and records[r][-1].get("done") for r in range(pp_size)
        ]
        if not all(finished):
            keys = ("model", "hook", "layer_ids")
            where = {
                rank: {key: lines[-1].get(key) for key in keys}
                for rank, lines in records.items()
                if lines and not lines[-1].get("done")
            }
            raise RuntimeError(
                f"PP workers failed (exit codes {codes}); last case: {where}"
            )
        return [
            r
            for r in records.get(pp_size - 1, [])
            if not r.get("started") and not r.get("done")
        ]


def _layer_id_sets(hook, layer_id_sets):
    if hook == "set_eagle3_layers_to_capture":
        return (*layer_id_sets, None)
    return tuple(layer_id_sets)


def family_jobs(cases=None, layer_id_sets=(LAYER_IDS,)):
    """(case, hook, layer ids) for every capture hook of ``cases`` (default:
    ``FAMILY``) and every capture id set of ``layer_id_sets``; EAGLE3 hooks also
    with None (the model's default layers)."""
    return [
        (case, hook, layer_ids)
        for case in (FAMILY if cases is None else cases)
        for hook in case[3]
        for layer_ids in _layer_id_sets(hook, layer_id_sets)
    ]


def _int_list(text):
    return [int(i) for i in text.split(",") if i.strip()]


def _parse_json_args(argv):
    parser = argparse.ArgumentParser(prog="test_pp_aux_capture_family.py --json")
    parser.add_argument("pp_size", type=int)
    parser.add_argument("models", nargs="*", help="default: every model of FAMILY")
    parser.add_argument(
        "--layer-ids",
        type=lambda text: [_int_list(part) for part in text.split(";")],
        default=[LAYER_IDS],
        help="';'-separated capture id sets, e.g. '1,3,4,6;0,1,2'",
    )
    parser.add_argument(
        "--batches",
        type=_int_list,
        default=list(BATCHES),
        help="token counts of the microbatches, e.g. '3,0,2'",
    )
    return parser.parse_args(argv)


class TestPPAuxCaptureFamily(CustomTestCase):
    def _check(self, pp_size):
        for entry in run_family(pp_size, family_jobs()):
            label = (
                f"{entry['model']}.{entry['hook']}({entry['layer_ids']}) pp={pp_size}"
            )
            with self.subTest(label):
                self.assertIsNone(entry["error"], entry.get("traceback"))
                self.assertTrue(entry["equal"], entry)
                self.assertEqual(entry["reference"], entry["pipelined"])

    def test_two_stages(self):
        self._check(2)

    def test_three_stages(self):
        self._check(3)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--json":
        # python test_pp_aux_capture_family.py --json PP [MODEL ...]
        #     [--layer-ids 1,3,4,6;0,1,2] [--batches 3,0,2]: raw results.
        args = _parse_json_args(sys.argv[2:])
        chosen = [c for c in FAMILY if not args.models or c[0] in args.models]
        jobs = family_jobs(chosen, args.layer_ids)
        print(json.dumps(run_family(args.pp_size, jobs, args.batches)))
    else:
        unittest.main()
