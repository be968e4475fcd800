"""Stage-to-stage handoff on the wire, the way a PP scheduler moves ``PPProxyTensors``.

A dict goes out as metadata first (a pickled list of ``(key, shape, dtype)`` for tensors
and ``(key, value)`` for plain values, preceded by its length) and then one message per
non-empty tensor, in dict order. The receiver rebuilds the dict in the same order, creating
empty tensors locally. Every send is recorded in a :class:`WireLog`, so runs can prove
what crossed the wire: keys, tensor bytes, metadata bytes.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from codemods.ppcheck.pp_aux_transport import AUX_ENTRY, Pending


@dataclass
class Channels:
    """Process groups of one run: ``tensors`` carries tensors (NCCL on GPUs), ``meta``
    carries metadata and handshakes (gloo), ``direct`` is the dedicated direct-mode
    group."""

    tensors: Any
    meta: Any
    direct: Any
    device: torch.device


@dataclass
class WireLog:
    """What one rank sent, per channel (``handoff`` or ``output``)."""

    sends: list[dict[str, Any]] = field(default_factory=list)

    def record(self, channel: str, dst: int, entries: list[tuple[str, int]], meta: int):
        self.sends.append({"channel": channel, "dst": dst, "entries": entries, "meta": meta})

    def summary(self, channel: str = "handoff") -> dict[str, Any]:
        sends = [s for s in self.sends if s["channel"] == channel]
        aux = sum(n for s in sends for k, n in s["entries"] if k == AUX_ENTRY)
        tensor = sum(n for s in sends for _, n in s["entries"])
        return {
            "messages": len(sends),
            "aux_bytes": aux,
            "base_bytes": tensor - aux,
            "meta_bytes": sum(s["meta"] for s in sends),
            "keys": [[k for k, _ in s["entries"]] for s in sends],
        }


def _tensor_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def send_dict(
    tensors: dict[str, Any],
    dst: int,
    channels: Channels,
    pending: Pending,
    log: WireLog,
    channel: str = "handoff",
) -> None:
    """Asynchronously send ``tensors`` to global rank ``dst``: metadata, then tensors."""
    metadata: list[tuple[str, tuple[int, ...] | None, Any]] = []
    payload = []
    for key, value in tensors.items():
        if isinstance(value, torch.Tensor):
            metadata.append((key, tuple(value.shape), str(value.dtype).split(".")[-1]))
            payload.append((key, value))
        else:
            metadata.append((key, None, value))
    blob = torch.frombuffer(bytearray(pickle.dumps(metadata)), dtype=torch.uint8)
    length = torch.tensor([blob.numel()], dtype=torch.int64)
    pending.add(dist.isend(length, dst=dst, group=channels.meta), length)
    pending.add(dist.isend(blob, dst=dst, group=channels.meta), blob)
    entries = []
    for key, tensor in payload:
        entries.append((key, _tensor_bytes(tensor)))
        if tensor.numel() == 0:
            continue
        tensor = tensor.contiguous()
        group = channels.meta if tensor.is_cpu else channels.tensors
        pending.add(dist.isend(tensor, dst=dst, group=group), tensor)
    log.record(channel, dst, entries, blob.numel() + _tensor_bytes(length))


def recv_dict(src: int, channels: Channels) -> dict[str, Any]:
    """Receive a dict sent by :func:`send_dict` from global rank ``src``."""
    length = torch.empty(1, dtype=torch.int64)
    dist.recv(length, src=src, group=channels.meta)
    blob = torch.empty(int(length.item()), dtype=torch.uint8)
    dist.recv(blob, src=src, group=channels.meta)
    # Through a list, not ``tensor.numpy()``: torch alone (no numpy) must do.
    metadata = pickle.loads(bytes(blob.tolist()))
    result: dict[str, Any] = {}
    for key, shape, value in metadata:
        if shape is None:
            result[key] = value
            continue
        tensor = torch.empty(shape, dtype=getattr(torch, value), device=channels.device)
        if tensor.numel() > 0:
            group = channels.meta if tensor.is_cpu else channels.tensors
            dist.recv(tensor, src=src, group=group)
        result[key] = tensor
    return result
