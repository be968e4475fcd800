"""Aux hidden-state capture under pipeline parallelism with the real model classes.

Every causal LM whose capture hooks the patch changes (``PATCHED``) is built through
its real ``__init__`` with a tiny config (``TINY_MODELS`` of the shared test utilities:
4 layers, hidden size 64) as stage 0 and stage 1 of 2 gloo processes, all models in one
start of the two ranks (forked from a server that has imported SGLang once).  Its capture hook takes one capture on each stage, and then:

* handoff: stage 0's ``pp_aux_outgoing`` entry (``aux_hidden_states``) goes to stage 1
  in the ``PPProxyTensors``, and stage 1's ``pp_aux_collect`` returns every capture in
  layer order, those of stage 0 equal to what stage 0 captured;
* sizing: ``resolve_pp_proxy_aux_hidden_size`` and ``allocate_pp_proxy_tensors`` (the
  functions the model runner and the CUDA graph runners size the handoff with) give
  stage 1 an ``aux_hidden_states`` buffer exactly as wide as the entry stage 0 sends,
  and stage 0 none; the entry is received into that buffer;
* validation (releases with that check): ``check_pipeline_parallel_compat`` accepts
  EAGLE3 with PP for a patched architecture and still refuses it for an architecture
  whose model file has no capture hook.

GPU-only packages SGLang imports (sgl_kernel, flashinfer, ...) are stood in for where
they do not import (``stub_gpu_only_packages``, ``sglang.test``), so the test runs on a
CPU machine.
"""

import importlib
import json
import os
import queue
import sys
import traceback
import unittest

import torch
import torch.distributed as dist

from sglang.test.pp_aux_capture_family_models import (
    TINY_HIDDEN,
    TINY_MODELS,
    free_port,
    init_parallel,
    stage_processes,
    stub_gpu_only_packages,
    tiny_config,
)

stub_gpu_only_packages()
# CPU: DeepSeek-V4 keeps its wo_a projection unquantized instead of asking for the FP8
# GEMM's weight scales (read when sglang.srt.models.deepseek_v4 is imported).
os.environ.setdefault("SGLANG_OPT_FP8_WO_A_GEMM", "0")

from sglang.test.ci.ci_register import register_cpu_ci  # noqa: E402
from sglang.test.test_utils import CustomTestCase  # noqa: E402

register_cpu_ci(est_time=120, suite="base-a-test-cpu")

#: The model files whose capture hooks the patch changes.
PATCHED = [
    # @@PATCHED_MODELS@@
]

PP_SIZE = 2
TOKENS = 3
AUX_ENTRY = "aux_hidden_states"
#: Hook arguments: one capture on each stage of the 4 layers (stage 0 runs [0, 2)),
#: whether the hook shifts the ids by one (EAGLE3's "after layer i") or not.
CAPTURE_IDS = [0, 2]

#: The models of ``TINY_MODELS`` this release's patch covers.
UNDER_TEST = {name: spec for name, spec in TINY_MODELS.items() if spec[0] in PATCHED}
TIMEOUT_S = 600.0


def _all_ok(ok):
    """Whether every rank is fine; a failure on one rank skips what follows on both,
    so no rank ever waits for a send that will not come."""
    flags = [None] * PP_SIZE
    dist.all_gather_object(flags, ok)
    return all(flags)


#: The capture hooks, in the order tried.
HOOKS = (
    "set_eagle3_layers_to_capture",
    "set_dflash_layers_to_capture",
    "set_dspark_layers_to_capture",
)


def _call_hook(lm):
    for hook in HOOKS:
        if hasattr(lm, hook):
            getattr(lm, hook)(list(CAPTURE_IDS))
            return hook
    raise RuntimeError(f"{type(lm).__name__} has no capture hook")


def _stack(lm):
    """The decoder stack the hook set the capture up on."""
    for module in lm.modules():
        if "pp_aux_relay" in vars(module):
            return module
    raise RuntimeError(f"no module of {type(lm).__name__} holds pp_aux_relay")


def _sizing(lm, rank):
    """(width the runner resolves, width of the aux buffer it allocates, buffers)."""
    from sglang.srt.model_executor.model_runner_components import misc_utils
    from sglang.srt.model_executor.runner_utils import buffers

    width = misc_utils.resolve_pp_proxy_aux_hidden_size(
        model=lm, pp_size=PP_SIZE, pp_rank=rank
    )
    # @@if public_allocate
    allocate = buffers.allocate_pp_proxy_tensors
    # @@else public_allocate
    allocate = buffers._allocate_pp_proxy_tensors
    # @@end public_allocate
    allocated = allocate(
        max_num_tokens=TOKENS,
        max_hidden_tokens=TOKENS,
        hidden_size=TINY_HIDDEN,
        dtype=torch.float32,
        pp_proxy_aux_hidden_size=width,
    )
    entry = allocated.get(AUX_ENTRY)
    return int(width), 0 if entry is None else int(entry.shape[-1]), allocated


def _capture(relay, value_of):
    """This stage's captures (a list, in layer order): layer id + 1 everywhere."""
    return [
        torch.full((TOKENS, relay.hidden_size), value_of(i))
        for i in relay.local_layer_ids
    ]


def _handoff(lm, stack, rank, allocated):
    """Stage 0 hands its captures to stage 1 in the PP proxy tensors, stage 1
    receives them into its allocated buffer and collects every capture."""
    from sglang.srt.layers.aux_hidden_states import pp_aux_collect, pp_aux_outgoing
    from sglang.srt.model_executor.forward_batch_info import PPProxyTensors

    relay = stack.pp_aux_relay
    if relay is None:
        raise RuntimeError("the capture hook set no relay up on this stage")
    captures = _capture(relay, lambda i: float(i + 1))
    if rank == 0:
        proxy = PPProxyTensors(
            {"hidden_states": torch.zeros(TOKENS, TINY_HIDDEN)}
            | pp_aux_outgoing(stack, captures, None)
        )
        entry = proxy.tensors.get(AUX_ENTRY)
        shape = [0, 0] if entry is None else list(entry.shape)
        dist.send_object_list([(shape, list(relay.local_layer_ids))], dst=1)
        if entry is not None:
            dist.send(entry.contiguous(), dst=1)
        return {"sent_ids": list(relay.local_layer_ids)}
    holder = [None]
    dist.recv_object_list(holder, src=0)
    shape, earlier_ids = holder[0]
    received = {}
    if shape[-1]:
        incoming = torch.empty(shape)
        dist.recv(incoming, src=0)
        # Into the buffer the runner allocated (exactly as wide, or copy_ fails).
        buffer = allocated[AUX_ENTRY][:TOKENS]
        buffer.copy_(incoming)
        received[AUX_ENTRY] = buffer
    collected = pp_aux_collect(stack, captures, PPProxyTensors(received))
    expected = [
        torch.full((TOKENS, relay.hidden_size), float(i + 1))
        for i in list(earlier_ids) + list(relay.local_layer_ids)
    ]
    return {
        "sent": int(shape[-1]),
        "earlier_ids": list(earlier_ids),
        "ids": list(relay.local_layer_ids),
        "in_order": list(earlier_ids) + list(relay.local_layer_ids)
        == sorted(list(earlier_ids) + list(relay.local_layer_ids)),
        "collected_equal": len(collected) == len(expected)
        and all(torch.equal(a, b) for a, b in zip(collected, expected)),
        "collected": [float(t[0, 0]) for t in collected],
    }


def _check(name, rank):
    module, cls_name, _, _ = TINY_MODELS[name]
    record = {"model": name, "cls": cls_name, "rank": rank}
    lm = None
    try:
        cls = getattr(importlib.import_module(f"sglang.srt.models.{module}"), cls_name)
        with torch.device("cpu"):
            lm = cls(config=tiny_config(name))
    except BaseException:
        record["error"] = "build: " + traceback.format_exc()[-3000:]
    if not _all_ok(lm is not None):
        record.setdefault("error", "build failed on the other rank")
        return record
    from sglang.srt.layers.aux_hidden_states import pp_aux_proxy_hidden_size

    stack = allocated = None
    try:
        record["hook"] = _call_hook(lm)
        stack = _stack(lm)
        record["reported"] = int(pp_aux_proxy_hidden_size(lm))
        record["resolved"], record["buffer"], allocated = _sizing(lm, rank)
    except BaseException:
        record["error"] = "hook/sizing: " + traceback.format_exc()[-3000:]
    if not _all_ok("error" not in record):
        record.setdefault("error", "hook or sizing failed on the other rank")
        return record
    try:
        record.update(_handoff(lm, stack, rank, allocated))
    except BaseException:
        record["error"] = "handoff: " + traceback.format_exc()[-3000:]
    return record


def _rank(rank, port, names, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    records = []
    try:
        torch.set_num_threads(1)
        init_parallel(rank, PP_SIZE, port, timeout=TIMEOUT_S)
        for name in names:
            records.append(_check(name, rank))
        results.put((rank, records, None))
    except BaseException:
        results.put((rank, records, traceback.format_exc()[-4000:]))


def run_ranks(names, timeout=TIMEOUT_S):
    """Records of both ranks for the models ``names``; errors of ranks that failed
    or did not answer within ``timeout`` seconds."""
    models = {f"sglang.srt.models.{TINY_MODELS[name][0]}" for name in names}
    context = stage_processes(_rank.__module__, *sorted(models))
    results = context.Queue()
    port = free_port()
    workers = [
        context.Process(target=_rank, args=(rank, port, names, results))
        for rank in range(PP_SIZE)
    ]
    for worker in workers:
        worker.start()
    records, errors = [], []
    try:
        for _ in workers:
            try:
                rank, got, error = results.get(timeout=timeout)
            except queue.Empty:
                errors.append(f"no answer within {timeout:.0f} s")
                break
            records += got
            if error:
                errors.append(f"rank {rank}: {error}")
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=5)
    return records, errors


#: An architecture whose model file has no capture hook (the patch leaves it as is).
UNPATCHED_ARCH = "Gemma2ForCausalLM"


class TestPPAuxCapture(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        cls.records, cls.errors = run_ranks(sorted(UNDER_TEST))
        cls.by_stage = {(r["model"], r["rank"]): r for r in cls.records}

    def test_every_patched_model_is_built(self):
        self.assertTrue(UNDER_TEST)
        self.assertEqual(self.errors, [])
        self.assertEqual(
            set(self.by_stage), {(name, r) for name in UNDER_TEST for r in range(2)}
        )
        for key, record in sorted(self.by_stage.items()):
            with self.subTest(model=key[0], rank=key[1]):
                self.assertNotIn("error", record, record.get("error"))

    def _check_each_model(self, check):
        """``check(first, last)`` on the records of each model's two stages, under a
        subTest of its own, once the last stage has run the model through."""
        for name in sorted(UNDER_TEST):
            first, last = self.by_stage.get((name, 0)), self.by_stage.get((name, 1))
            with self.subTest(model=name):
                self.assertTrue(first and last and "error" not in last, (first, last))
                check(first, last)

    def test_handoff_reaches_the_last_stage_in_layer_order(self):
        def check(first, last):
            self.assertEqual(first["sent_ids"], last["earlier_ids"])
            self.assertTrue(last["earlier_ids"] and last["ids"], last)
            self.assertTrue(last["in_order"], last)
            self.assertTrue(last["collected_equal"], last)

        self._check_each_model(check)

    def test_stage_one_buffer_is_as_wide_as_what_stage_zero_sends(self):
        def check(first, last):
            self.assertEqual(
                (first["reported"], first["resolved"], first["buffer"]), (0, 0, 0)
            )
            self.assertEqual(last["sent"], TINY_HIDDEN * len(last["earlier_ids"]))
            self.assertEqual(
                (last["reported"], last["resolved"], last["buffer"]),
                (last["sent"],) * 3,
            )

        self._check_each_model(check)
    # @@if pp_compat_check

    def test_validation_accepts_patched_architectures_only(self):
        from sglang.srt.arg_groups.overrides import resolving_view
        from sglang.srt.arg_groups.validation_hook import (
            check_pipeline_parallel_compat as check,
        )
        from sglang.test.pp_aux_capture_family_models import pp_server_args

        # The architectures whose patched hooks include EAGLE3's (others relay only
        # DFLASH or DSPARK captures).
        patched = sorted(
            {
                TINY_MODELS[name][1]
                for name in UNDER_TEST
                if self.by_stage.get((name, 1), {}).get("hook")
                == "set_eagle3_layers_to_capture"
            }
        )
        self.assertTrue(patched)
        for arch in patched:
            with self.subTest(arch=arch):
                check(resolving_view(pp_server_args(arch)))
        with self.assertRaises((AssertionError, ValueError)):
            check(resolving_view(pp_server_args(UNPATCHED_ARCH)))
    # @@end pp_compat_check


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--json":
        # python test_pp_aux_capture.py --json [MODEL ...]: the raw records.
        chosen = sys.argv[2:] or sorted(UNDER_TEST)
        records, errors = run_ranks(chosen)
        print(json.dumps({"records": records, "errors": errors}))
    else:
        unittest.main()
