"""CPU multi-process test of aux hidden-state capture under pipeline parallelism.

Each pipeline stage runs in its own process (gloo). A toy decoder stamps the layer id
and the microbatch into the hidden states; every stage captures the layers it owns and
``PPAuxTransport`` carries the captures to the last stage, which must see exactly what a
single-stage (PP=1) run captures, in layer order, for every microbatch (including an
empty one).

Usage:
python3 -m unittest test_pp_aux_capture
"""

import importlib
import importlib.util
import os
import socket
import sys
import types
import traceback
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

try:
    from sglang.test.ci.ci_register import register_cpu_ci
    from sglang.test.test_utils import CustomTestCase
except ImportError:  # sglang does not import (a CPU-only machine without triton)
    CustomTestCase = unittest.TestCase

    def register_cpu_ci(*args, **kwargs):
        return None


register_cpu_ci(est_time=60, suite="base-a-test-cpu")

TRANSPORT_MODULE = "sglang.srt.distributed.pp_aux_transport"
STANDALONE_PACKAGE = "pp_aux_standalone"


def _load_transport():
    """The transport module.  It needs only torch, so where the ``sglang`` package does
    not import (its ``__init__`` pulls in triton) it is loaded from its file."""
    try:
        return importlib.import_module(TRANSPORT_MODULE)
    except (ImportError, KeyError):  # KeyError: the package failed half-way earlier
        package = importlib.util.find_spec("sglang")
        if package is None or not package.submodule_search_locations:
            raise
        # A stand-in package for the folder, so that the transport's relative import of
        # the plan module resolves without running ``sglang/__init__``.
        standalone = types.ModuleType(STANDALONE_PACKAGE)
        standalone.__path__ = [
            os.path.join(package.submodule_search_locations[0], "srt", "distributed")
        ]
        sys.modules[STANDALONE_PACKAGE] = standalone
        return importlib.import_module(f"{STANDALONE_PACKAGE}.pp_aux_transport")


_transport = _load_transport()
AuxCapturePlan = _transport.AuxCapturePlan
PPAuxTransport = _transport.PPAuxTransport
new_direct_group = _transport.new_direct_group
validate_layer_ids = _transport.validate_layer_ids

NUM_LAYERS = 7
HIDDEN_SIZE = 8
MICROBATCH_TOKENS = (3, 0, 5)
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _embed(tokens: int, microbatch: int) -> torch.Tensor:
    values = torch.arange(tokens * HIDDEN_SIZE, dtype=torch.float64)
    return values.view(tokens, HIDDEN_SIZE) + 1000.0 * microbatch


def _decoder_layer(hidden, residual, layer_id: int, microbatch: int):
    residual = hidden if residual is None else hidden + residual
    hidden = residual * 0.5 + (layer_id + 1) + 100.0 * microbatch
    return hidden, residual


def _reference(layer_ids):
    """Captures of a PP=1 run: one list per microbatch, in layer order."""
    result = []
    for microbatch, tokens in enumerate(MICROBATCH_TOKENS):
        hidden, residual, captures = _embed(tokens, microbatch), None, []
        for layer_id in range(NUM_LAYERS):
            hidden, residual = _decoder_layer(hidden, residual, layer_id, microbatch)
            if layer_id in layer_ids:
                captures.append(hidden + residual)
        result.append(captures)
    return result


def _send_handoff(tensors, dst: int) -> None:
    meta = {key: (tuple(t.shape), t.dtype) for key, t in tensors.items()}
    dist.send_object_list([meta], dst=dst)
    for key in sorted(tensors):
        if tensors[key].numel():
            dist.send(tensors[key].contiguous(), dst=dst)


def _recv_handoff(src: int):
    meta = [None]
    dist.recv_object_list(meta, src=src)
    tensors = {}
    for key in sorted(meta[0]):
        shape, dtype = meta[0][key]
        tensors[key] = torch.empty(shape, dtype=dtype)
        if tensors[key].numel():
            dist.recv(tensors[key], src=src)
    return tensors


def _stage(rank, world_size, port, mode, layer_ids, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        ranks = list(range(world_size))
        direct_group = new_direct_group(ranks, backend="gloo")
        plan = AuxCapturePlan.build(
            sorted(layer_ids), NUM_LAYERS, rank, world_size, mode=mode
        )
        transport = PPAuxTransport(
            plan, group=dist.group.WORLD, direct_group=direct_group, ranks=ranks
        )
        transport.handshake(HIDDEN_SIZE, dtype=None)
        collected = []
        for microbatch, tokens in enumerate(MICROBATCH_TOKENS):
            incoming = None
            if rank == 0:
                hidden, residual = _embed(tokens, microbatch), None
            else:
                incoming = _recv_handoff(rank - 1)
                hidden, residual = incoming["hidden_states"], incoming["residual"]
            captures = {}
            for layer_id in range(plan.start_layer, plan.end_layer):
                hidden, residual = _decoder_layer(
                    hidden, residual, layer_id, microbatch
                )
                if plan.owns(layer_id) and layer_id in plan.layer_ids:
                    captures[layer_id] = hidden + residual
            if not plan.is_last_stage:
                handoff = {"hidden_states": hidden, "residual": residual}
                handoff.update(transport.outgoing(captures, incoming))
                _send_handoff(handoff, rank + 1)
            else:
                collected.append(transport.collect(captures, incoming, like=hidden))
        transport.flush()
        if plan.is_last_stage:
            expected = _reference(layer_ids)
            same = len(collected) == len(expected) and all(
                len(got) == len(want)
                and all(torch.equal(g, w) for g, w in zip(got, want))
                for got, want in zip(collected, expected)
            )
            results.put((rank, "ok" if same else "mismatch"))
        else:
            results.put((rank, "ok"))
        dist.barrier()
    except Exception:
        results.put((rank, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(world_size: int, mode: str, layer_ids):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_stage, args=(rank, world_size, port, mode, layer_ids, results)
        )
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    outcome = {}
    try:
        for _ in procs:
            rank, status = results.get(timeout=TIMEOUT_S)
            outcome[rank] = status
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
    return outcome


class TestPPAuxCapture(CustomTestCase):
    def test_validate_layer_ids(self):
        with self.assertRaisesRegex(ValueError, "requires explicit layer_ids"):
            validate_layer_ids(None, NUM_LAYERS)
        with self.assertRaises(ValueError):
            validate_layer_ids([0, NUM_LAYERS], NUM_LAYERS)
        with self.assertRaises(ValueError):
            validate_layer_ids([1, 1], NUM_LAYERS)
        self.assertEqual(validate_layer_ids((3, 1), NUM_LAYERS), [3, 1])

    def test_relay_two_stages(self):
        outcome = _run(2, "relay", [0, 2, 3, 6])
        self.assertEqual(outcome, {0: "ok", 1: "ok"})

    def test_relay_three_stages(self):
        outcome = _run(3, "relay", [6, 0, 3, 2])
        self.assertEqual(outcome, {0: "ok", 1: "ok", 2: "ok"})

    def test_direct_three_stages(self):
        outcome = _run(3, "direct", [0, 1, 4, 6])
        self.assertEqual(outcome, {0: "ok", 1: "ok", 2: "ok"})


if __name__ == "__main__":
    unittest.main()
