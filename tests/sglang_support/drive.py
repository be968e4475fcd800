"""Drive real-model pipeline stages across forked processes (gloo on CPU).

``drive(factory, spec, pp_size, token_counts)`` forks one process per stage from a parent
that has already imported the model module (SGLang's import takes seconds; forking shares
it), initialises a gloo process group, creates the dedicated direct-mode group, builds each
stage with ``factory(spec, rank, pp_size, transport_kwargs)`` (the stage-factory interface of
``codemods.ppcheck``), and moves the handoff dict between adjacent stages with real
send/recv (metadata first, then tensors), one microbatch per entry of ``token_counts``.
The last stage's ``(hidden_states, aux_list)`` per microbatch comes back to the caller; a
stage that raises sends its exception text back instead.  Nothing waits forever: the
parent gives up after ``timeout`` seconds and kills what is left.

Use it from a subprocess that runs under ``env.sglang_env`` (see ``drive_main``).
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from codemods.ppcheck.runner import free_port


def send_handoff(tensors: dict[str, torch.Tensor], dst: int) -> None:
    meta = {key: (tuple(t.shape), t.dtype) for key, t in tensors.items()}
    dist.send_object_list([meta], dst=dst)
    for key in sorted(tensors):
        if tensors[key].numel():
            dist.send(tensors[key].contiguous(), dst=dst)


def recv_handoff(src: int) -> dict[str, torch.Tensor]:
    box: list[Any] = [None]
    dist.recv_object_list(box, src=src)
    tensors = {}
    for key in sorted(box[0]):
        shape, dtype = box[0][key]
        tensors[key] = torch.empty(shape, dtype=dtype)
        if tensors[key].numel():
            dist.recv(tensors[key], src=src)
    return tensors


@dataclass
class DriveResult:
    """Per rank: "ok" or an error text; ``outputs``: the last stage's per-microbatch
    ``(hidden_states, aux_list)``."""

    status: dict[int, str] = field(default_factory=dict)
    outputs: list[tuple[torch.Tensor, list[torch.Tensor]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.status) and all(s == "ok" for s in self.status.values())

    def errors(self) -> str:
        return "\n".join(f"rank {r}: {s}" for r, s in sorted(self.status.items()) if s != "ok")


def _to_bytes(value: Any) -> bytes:
    # Plain bytes through the queue: torch's shared-memory tensor pickling would need the
    # stage process to stay alive until the parent has read the tensors.
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def _from_bytes(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


def _stage_process(factory, spec, rank, pp_size, port, token_counts, hidden_size, results):
    from sglang_support.stages import embed_input

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=pp_size)
        ranks = list(range(pp_size))
        direct_group = dist.new_group(ranks=ranks, backend="gloo")
        kwargs = {"group": dist.group.WORLD, "direct_group": direct_group, "ranks": ranks}
        stage = factory(spec, rank, pp_size, kwargs)
        outputs = []
        for mb, tokens in enumerate(token_counts):
            if rank == 0:
                out = stage.forward(mb, embed_input(tokens, mb, hidden_size), None)
            else:
                out = stage.forward(mb, None, recv_handoff(rank - 1))
            if rank < pp_size - 1:
                send_handoff(out, rank + 1)
            else:
                outputs.append(out)
        # Complete outstanding sends of a stage that keeps any (the toy's direct mode).
        flush = getattr(stage, "flush", None)
        if flush is not None:
            flush()
        results.put((rank, "ok", _to_bytes(outputs)))
        dist.barrier()
    except BaseException:
        results.put((rank, traceback.format_exc(), _to_bytes([])))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def drive(
    factory: Callable, spec: dict, pp_size: int, token_counts: list[int], timeout: float = 120.0
) -> DriveResult:
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    port = free_port()
    hidden_size = int(spec.get("hidden_size", 8))
    procs = [
        ctx.Process(
            target=_stage_process,
            args=(factory, spec, rank, pp_size, port, token_counts, hidden_size, results),
        )
        for rank in range(pp_size)
    ]
    for proc in procs:
        proc.start()
    result = DriveResult()
    try:
        for _ in procs:
            try:
                rank, status, outputs = results.get(timeout=timeout)
            except queue.Empty:
                missing = sorted(set(range(pp_size)) - set(result.status))
                for rank in missing:
                    result.status[rank] = f"no answer within {timeout:.0f} s"
                break
            result.status[rank] = status
            if rank == pp_size - 1:
                result.outputs = _from_bytes(outputs)
            if status != "ok":
                # A failed stage leaves its peers blocked in recv: stop waiting.
                for other in range(pp_size):
                    result.status.setdefault(other, "stopped after a peer failed")
                break
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    return result


def same_outputs(got, want) -> tuple[bool, str]:
    """``torch.equal`` on every aux tensor (and the final hidden states) per microbatch."""
    if len(got) != len(want):
        return False, f"{len(got)} microbatches, expected {len(want)}"
    for mb, ((hidden, aux), (ref_hidden, ref_aux)) in enumerate(zip(got, want, strict=False)):
        if len(aux) != len(ref_aux):
            return False, f"microbatch {mb}: {len(aux)} aux states, expected {len(ref_aux)}"
        for index, (a, b) in enumerate(zip(aux, ref_aux, strict=False)):
            if not torch.equal(a, b):
                return False, f"microbatch {mb}: aux state {index} differs"
        if not torch.equal(hidden, ref_hidden):
            return False, f"microbatch {mb}: final hidden states differ"
    return True, "equal"
