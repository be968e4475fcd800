"""Carry aux hidden states captured on every pipeline stage to the last stage.

``auxcap validate-pp``'s transport: it measures the relay the upstream patch ships
(``codemods/upstream/shipped/pp_aux_capture.py``) against a point-to-point alternative
(direct mode) on real process groups.  It is not part of the upstream patch.

Under pipeline parallelism (PP) a speculative drafter runs on the last stage, but the
layers whose hidden states it consumes live on every stage. This module gives a model's
forward what it needs to move those captures:

* ``validate_layer_ids`` checks the requested capture ids once, identically on every
  rank, before any communication.
* ``pp_layer_range`` / ``owner_stage`` tell which stage owns a layer (same rule as
  ``get_pp_indices``: even split, remainder layers on the last stages,
  ``SGLANG_PP_LAYER_PARTITION`` override).
* ``PPAuxTransport`` carries captures in one of two modes:

  - ``relay``: captures ride the stage-to-stage handoff dict (``PPProxyTensors``)
    in one entry, ``aux_hidden_states``: the ``[tokens, hidden]`` captures of every
    earlier stage side by side in ascending layer order, ``[tokens, n * hidden]``, the
    layout of SGLang's ``dspark_hidden_states``. Its width on each stage is known
    ahead of time (``AuxCapturePlan.proxy_hidden_size``), so CUDA graph runners can
    preallocate it like any other proxy entry. A stage that captures nothing passes
    the entry on by reference. A capture made on stage ``s`` crosses ``P - 1 - s``
    hops.
  - ``direct``: stages two or more hops from the last ``isend`` their captures straight
    to the last rank on a *dedicated* process group, so the transfers can never be
    matched against the scheduler's own send/recv on the same rank pair (NCCL has no
    tags). The stage next to the last rides the handoff. Every capture crosses one hop.
    The last rank shapes its receive buffers from the hidden states it already holds
    (``[tokens, hidden]``, same dtype and device), so no metadata is exchanged, and a
    0-token batch sends and receives nothing.

* On the last stage ``PPAuxTransport.collect`` returns the captures in the requested
  order and raises, naming the layers, if the entry is missing or unexpected or its
  width or row count is wrong: it never returns fewer features than requested.
* ``PPAuxTransport.handshake`` (or ``PPAuxTransport.create``) compares ids, partition,
  hidden size, dtype and mode across the PP group (``all_gather_objects``: torch only,
  no numpy) and raises on every rank when they disagree, instead of hanging later in a
  mismatched receive.

Direct mode and outstanding sends: ``outgoing`` never waits on its ``isend`` handles (a
far stage must not block before the scheduler's own handoff proceeds, or the pipeline
deadlocks). The handles, together with the tensors they read, are kept until they
complete; ``poll()`` drops the finished ones (it runs on every ``outgoing`` call) and
``flush()`` waits for all of them. Call ``flush()`` when the stage is idle or shutting
down.

Creating the direct group is collective: ``new_direct_group`` calls
``torch.distributed.new_group``, which every process of the default group must call, in
the same order, even processes that are not members.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

# The torch-free part (who captures what, where it travels) lives next to this module,
# so tools without torch can plan with the same code.
from .pp_aux_plan import (
    AUX_ENTRY,
    DEFAULT_FEATURE,
    MODES,
    PP_LAYER_PARTITION_ENV,
    AuxCapturePlan,
    layer_partition,
    owner_stage,
    partition_from_string,
    pp_layer_range,
    validate_layer_ids,
)

__all__ = [
    "AUX_ENTRY",
    "DEFAULT_FEATURE",
    "MODES",
    "PP_LAYER_PARTITION_ENV",
    "AuxCapturePlan",
    "PPAuxTransport",
    "all_gather_objects",
    "layer_partition",
    "new_direct_group",
    "owner_stage",
    "partition_from_string",
    "pp_layer_range",
    "validate_layer_ids",
]


def new_direct_group(ranks: Sequence[int], backend: str | None = None) -> Any:
    """Create the dedicated group for direct-mode transfers.

    Collective: every process of the default group must call this (members or not), in
    the same order relative to other ``new_group`` calls.
    """
    return dist.new_group(ranks=list(ranks), backend=backend)


def all_gather_objects(payload: Any, group: Any = None) -> list[Any]:
    """``payload`` of every rank of ``group``, in rank order. Collective on ``group``.

    Does what ``all_gather_object`` does with two tensor collectives (sizes, then the
    pickles padded to the longest), and decodes through ``tolist()``: torch's own
    object collectives decode with ``Tensor.numpy()``, which needs numpy installed.
    """
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    data = pickle.dumps(payload)
    size = dist.get_world_size(group=group)
    local = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(local) for _ in range(size)]
    dist.all_gather(sizes, local, group=group)
    lengths = [int(entry.item()) for entry in sizes]
    longest = max(lengths)
    buffer = torch.zeros(longest, dtype=torch.uint8)
    buffer[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    buffer = buffer.to(device)
    chunks = [torch.empty_like(buffer) for _ in range(size)]
    dist.all_gather(chunks, buffer, group=group)
    return [
        pickle.loads(bytes(chunk[:length].cpu().tolist()))
        for chunk, length in zip(chunks, lengths, strict=False)
    ]


def _all_gather(group: Any, payload: Any, pp_size: int) -> list[Any]:
    # A single stage has nobody to agree with; it must not touch the default group.
    if pp_size == 1 or not dist.is_available() or not dist.is_initialized():
        return [payload]
    return all_gather_objects(payload, group)


def _describe_disagreement(gathered: Sequence[Mapping[str, Any]]) -> str:
    errors = [
        f"rank {index}: {entry['error']}"
        for index, entry in enumerate(gathered)
        if entry.get("error")
    ]
    if errors:
        return "invalid aux capture config: " + "; ".join(errors)
    reference = gathered[0]
    problems = []
    for index, entry in enumerate(gathered):
        if entry.get("pp_rank") != index:
            problems.append(f"rank {index} reports pp_rank={entry.get('pp_rank')}")
        for key in sorted(set(reference) | set(entry)):
            if key in ("pp_rank", "error"):
                continue
            if entry.get(key) != reference.get(key):
                problems.append(
                    f"{key}: rank 0 has {reference.get(key)!r}, rank {index} has {entry.get(key)!r}"
                )
    if not problems:
        return ""
    return "aux capture config differs across PP ranks: " + "; ".join(problems)


class Pending:
    """Outstanding ``isend`` handles with the buffers they read (kept alive until sent)."""

    def __init__(self) -> None:
        self._works: list[tuple[Any, Any]] = []

    def __len__(self) -> int:
        return len(self._works)

    def add(self, work: Any, keep: Any) -> None:
        self._works.append((work, keep))

    def poll(self) -> None:
        """Drop the handles whose send has completed."""
        self._works = [(w, k) for w, k in self._works if not w.is_completed()]

    def wait(self) -> None:
        """Wait for every outstanding send."""
        works, self._works = self._works, []
        for work, _ in works:
            work.wait()


class PPAuxTransport:
    """Move one forward's captures to the last stage (see the module docstring)."""

    def __init__(
        self,
        plan: AuxCapturePlan,
        *,
        group: Any = None,
        direct_group: Any = None,
        ranks: Sequence[int] | None = None,
    ) -> None:
        self.plan = plan
        self.group = group
        self.direct_group = direct_group
        self._ranks = list(ranks) if ranks is not None else None
        if self._ranks is not None and len(self._ranks) != plan.pp_size:
            raise ValueError(
                f"ranks has {len(self._ranks)} entries, expected pp_size={plan.pp_size}."
            )
        self.needs_direct = any(plan.sends_direct(s) for s in range(plan.pp_size))
        if self.needs_direct and direct_group is None:
            raise ValueError(
                "direct mode needs a dedicated direct_group (see new_direct_group) so "
                "its transfers never match the scheduler's own send/recv."
            )
        self.hidden_size: int | None = None
        self.dtype: torch.dtype | None = None
        self._pending = Pending()
        self.stats: dict[str, int] = {
            "direct_sends": 0,
            "direct_send_bytes": 0,
            "direct_recvs": 0,
            "direct_recv_bytes": 0,
        }

    # ------------------------------------------------------------------ set-up
    @classmethod
    def create(
        cls,
        layer_ids: Any,
        num_layers: int,
        *,
        pp_rank: int,
        pp_size: int,
        hidden_size: int,
        dtype: torch.dtype,
        mode: str = "relay",
        feature: str = DEFAULT_FEATURE,
        group: Any = None,
        direct_group: Any = None,
        ranks: Sequence[int] | None = None,
    ) -> PPAuxTransport:
        """Validate, build the plan and handshake in one step.

        A rank whose own config is invalid still joins the handshake, so every rank
        raises the same ``ValueError`` rather than the others waiting for it.
        """
        plan = None
        error = ""
        try:
            plan = AuxCapturePlan.build(
                layer_ids, num_layers, pp_rank, pp_size, mode=mode, feature=feature
            )
        except ValueError as err:
            error = str(err)
        payload = (
            cls._payload(plan, hidden_size, dtype)
            if plan is not None
            else {"pp_rank": pp_rank, "error": error}
        )
        message = _describe_disagreement(_all_gather(group, payload, pp_size))
        if message:
            raise ValueError(message)
        assert plan is not None
        transport = cls(plan, group=group, direct_group=direct_group, ranks=ranks)
        transport.hidden_size = int(hidden_size)
        transport.dtype = dtype
        return transport

    @staticmethod
    def _payload(plan: AuxCapturePlan, hidden_size: int, dtype: torch.dtype) -> dict[str, Any]:
        payload = plan.fingerprint()
        payload.update(pp_rank=plan.pp_rank, hidden_size=int(hidden_size), dtype=str(dtype))
        return payload

    def handshake(self, hidden_size: int, dtype: torch.dtype) -> None:
        """Compare the config across the PP group; raise ``ValueError`` on every rank
        when any rank disagrees. Collective on ``group``."""
        payload = self._payload(self.plan, hidden_size, dtype)
        gathered = _all_gather(self.group, payload, self.plan.pp_size)
        message = _describe_disagreement(gathered)
        if message:
            raise ValueError(message)
        self.hidden_size = int(hidden_size)
        self.dtype = dtype

    @property
    def ranks(self) -> list[int]:
        if self._ranks is None:
            if self.group is not None and dist.is_initialized():
                self._ranks = list(dist.get_process_group_ranks(self.group))
            else:
                self._ranks = list(range(self.plan.pp_size))
        return self._ranks

    @property
    def last_rank(self) -> int:
        return self.ranks[-1]

    # ------------------------------------------------------------ non-last stage
    def outgoing(
        self,
        captures: Mapping[int, torch.Tensor],
        incoming: Mapping[str, torch.Tensor] | None,
    ) -> dict[str, torch.Tensor]:
        """Aux entries to merge into the handoff sent to the next stage."""
        plan = self.plan
        if plan.is_last_stage:
            raise RuntimeError("outgoing() is for non-last stages; use collect().")
        self._check_local(captures)
        earlier = self._incoming_entry(incoming, captures)
        self.poll()
        if plan.sends_direct(plan.pp_rank):
            for layer_id in sorted(plan.local_layer_ids):
                self._isend(captures[layer_id])
            return {}
        pieces = [] if earlier is None else [earlier]
        pieces += [captures[i] for i in sorted(plan.local_layer_ids)]
        if not pieces:
            return {}
        if len(pieces) == 1:
            return {AUX_ENTRY: pieces[0]}
        return {AUX_ENTRY: torch.cat(pieces, dim=-1)}

    def _isend(self, tensor: torch.Tensor) -> None:
        self._check_wire_tensor(tensor)
        if tensor.numel() == 0:
            return
        tensor = tensor.contiguous()
        work = dist.isend(tensor, dst=self.last_rank, group=self.direct_group)
        self._pending.add(work, tensor)
        self.stats["direct_sends"] += 1
        self.stats["direct_send_bytes"] += tensor.numel() * tensor.element_size()

    def _check_wire_tensor(self, tensor: torch.Tensor) -> None:
        if self.dtype is not None and tensor.dtype != self.dtype:
            raise RuntimeError(
                f"direct aux capture has dtype {tensor.dtype}, handshake said {self.dtype}."
            )
        if (
            self.hidden_size is not None
            and tensor.dim() > 0
            and tensor.shape[-1] != self.hidden_size
        ):
            raise RuntimeError(
                f"direct aux capture has hidden size {tensor.shape[-1]}, "
                f"handshake said {self.hidden_size}."
            )

    @property
    def pending_sends(self) -> int:
        return len(self._pending)

    def poll(self) -> None:
        """Drop the direct sends that have completed."""
        self._pending.poll()

    def flush(self) -> None:
        """Wait for every outstanding direct send."""
        self._pending.wait()

    # ---------------------------------------------------------------- last stage
    def collect(
        self,
        captures: Mapping[int, torch.Tensor],
        incoming: Mapping[str, torch.Tensor] | None,
        like: torch.Tensor,
    ) -> list[torch.Tensor]:
        """All captures in requested order; ``RuntimeError`` if any is missing/extra."""
        plan = self.plan
        if not plan.is_last_stage:
            raise RuntimeError("collect() is for the last stage; use outgoing().")
        self._check_local(captures)
        gathered: dict[int, torch.Tensor] = {}
        if plan.pp_size > 1:
            entry = self._incoming_entry(incoming, captures, like)
            if entry is not None:
                pieces = entry.split(like.shape[-1], dim=-1)
                gathered.update(zip(plan.incoming_ids(), pieces, strict=False))
            gathered.update(self._receive_direct(like))
        for layer_id in plan.local_layer_ids:
            gathered[layer_id] = captures[layer_id]
        missing = [i for i in plan.layer_ids if i not in gathered]
        extra = sorted(set(gathered) - set(plan.layer_ids))
        if missing or extra:
            raise RuntimeError(
                f"aux hidden capture on the last stage: missing layers {missing}, "
                f"unexpected layers {extra} (requested {list(plan.layer_ids)})."
            )
        result = [gathered[layer_id] for layer_id in plan.layer_ids]
        for layer_id, tensor in zip(plan.layer_ids, result, strict=False):
            if tensor.shape != like.shape:
                raise RuntimeError(
                    f"aux capture of layer {layer_id} has shape {tuple(tensor.shape)}, "
                    f"expected {tuple(like.shape)}."
                )
        return result

    def _receive_direct(self, like: torch.Tensor) -> dict[int, torch.Tensor]:
        transfers = self.plan.direct_ids()
        received: dict[int, torch.Tensor] = {}
        if not transfers:
            return received
        works = []
        for stage, layer_id in transfers:
            buffer = torch.empty(like.shape, dtype=like.dtype, device=like.device)
            received[layer_id] = buffer
            if buffer.numel() == 0:
                continue
            work = dist.irecv(buffer, src=self.ranks[stage], group=self.direct_group)
            if work is None:  # (what torch returns on a rank outside the group)
                raise RuntimeError("the last rank is not in the direct aux capture group.")
            works.append(work)
            self.stats["direct_recvs"] += 1
            self.stats["direct_recv_bytes"] += buffer.numel() * buffer.element_size()
        for work in works:
            work.wait()
        return received

    # ------------------------------------------------------------------- checks
    def _check_local(self, captures: Mapping[int, torch.Tensor]) -> None:
        expected = set(self.plan.local_layer_ids)
        got = set(captures)
        if got != expected:
            raise RuntimeError(
                f"stage {self.plan.pp_rank} captured layers {sorted(got)}, "
                f"expected {sorted(expected)}."
            )

    def _incoming_entry(
        self,
        incoming: Mapping[str, torch.Tensor] | None,
        captures: Mapping[int, torch.Tensor],
        like: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """The ``AUX_ENTRY`` tensor this stage received, checked against the plan:
        present exactly when earlier stages hand captures on, ``[tokens, n * hidden]``
        for the ``n`` layers it must hold. Raises ``RuntimeError`` naming the layers."""
        plan = self.plan
        expected = plan.incoming_ids()
        entry = None if incoming is None else incoming.get(AUX_ENTRY)
        where = f"stage {plan.pp_rank} (mode {plan.mode})"
        if entry is None:
            if expected:
                raise RuntimeError(
                    f"{where}: the PP handoff has no {AUX_ENTRY!r} entry, so the aux "
                    f"captures of layers {expected} are missing "
                    f"(requested {list(plan.layer_ids)})."
                )
            return None
        if not expected:
            raise RuntimeError(
                f"{where}: the PP handoff carries an {AUX_ENTRY!r} entry of shape "
                f"{tuple(entry.shape)}, but none of the requested layers "
                f"{list(plan.layer_ids)} reaches this stage through the handoff."
            )
        reference = like
        if reference is None and captures:
            reference = next(iter(captures.values()))
        hidden = self.hidden_size if reference is None else reference.shape[-1]
        rows_ok = reference is None or (
            entry.dim() == reference.dim() and entry.shape[:-1] == reference.shape[:-1]
        )
        width_ok = not hidden or entry.shape[-1] == len(expected) * hidden
        if entry.dim() == 0 or not rows_ok or not width_ok:
            want = "n/a" if reference is None else tuple(reference.shape[:-1])
            raise RuntimeError(
                f"{where}: the {AUX_ENTRY!r} entry has shape {tuple(entry.shape)}, "
                f"expected rows {want} and width {len(expected)} x {hidden} for the "
                f"aux captures of layers {expected}."
            )
        return entry
