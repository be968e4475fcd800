"""Which stage captures which layer, and where each capture travels: torch-free.

The arithmetic of the PP aux transport (``pp_aux_transport.py``, which imports it from
here). It needs neither torch nor a process group, so it can plan a run ahead of time,
for example to size buffers or to describe the traffic of a configuration.

* ``validate_layer_ids`` checks requested capture ids (same answer on every rank).
* ``partition_from_string`` / ``layer_partition`` / ``pp_layer_range`` / ``owner_stage``
  follow ``get_pp_indices`` (remainder layers on the last stages,
  ``SGLANG_PP_LAYER_PARTITION`` override).
* ``AuxCapturePlan`` says who captures what, which stages send directly to the last one
  (direct mode), which ids each stage-to-stage handoff carries in its ``AUX_ENTRY``
  entry and how wide that entry is (``proxy_hidden_size``).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: The one ``PPProxyTensors`` entry that carries the captures of earlier stages to the
#: next one: their ``[tokens, hidden]`` captures side by side in ascending layer order,
#: ``[tokens, len(ids) * hidden]`` (as SGLang's ``dspark_hidden_states``).
AUX_ENTRY = "aux_hidden_states"
PP_LAYER_PARTITION_ENV = "SGLANG_PP_LAYER_PARTITION"
MODES = ("relay", "direct")
#: The capture method whose messages the checks give by default: the one SGLang relays in
#: its own model files (``codemods.catalog.methods.NATIVE``; this module imports nothing of
#: ``codemods``, so that it and the transport can be used on their own).
DEFAULT_FEATURE = "DSPARK"


def validate_layer_ids(
    layer_ids: Any, num_layers: int, *, feature: str = DEFAULT_FEATURE
) -> list[int]:
    """Check the capture ids and return them as a new list, requested order kept.

    Raises ``ValueError`` for None, a value that is not a list or tuple, an element
    that is not an int (bool included), an id outside ``[0, num_layers)``, duplicates,
    or an empty list. Pure: gives the same answer on every rank.
    """
    if layer_ids is None:
        raise ValueError(f"{feature} requires explicit layer_ids for aux hidden capture.")
    if not isinstance(layer_ids, (list, tuple)):
        raise ValueError(
            f"{feature} layer_ids must be a list or tuple of ints, got {type(layer_ids).__name__}."
        )
    if _is_bool(num_layers) or not isinstance(num_layers, numbers.Integral):
        raise ValueError(f"num_layers must be an int, got {num_layers!r}.")
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}.")
    if len(layer_ids) == 0:
        raise ValueError(f"{feature} layer_ids must not be empty.")
    result: list[int] = []
    seen = set()
    for position, layer_id in enumerate(layer_ids):
        if _is_bool(layer_id) or not isinstance(layer_id, numbers.Integral):
            raise ValueError(f"{feature} layer_ids[{position}] must be an int, got {layer_id!r}.")
        layer_id = int(layer_id)
        if not 0 <= layer_id < num_layers:
            raise ValueError(
                f"{feature} layer_ids[{position}] = {layer_id} is out of range [0, {num_layers})."
            )
        if layer_id in seen:
            raise ValueError(f"{feature} layer_ids has duplicate layer id {layer_id}.")
        seen.add(layer_id)
        result.append(layer_id)
    return result


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def _check_pp(pp_rank: int, pp_size: int) -> None:
    if pp_size < 1:
        raise ValueError(f"pp_size must be >= 1, got {pp_size}.")
    if not 0 <= pp_rank < pp_size:
        raise ValueError(f"pp_rank must be in [0, {pp_size}), got {pp_rank}.")


def partition_from_string(
    partition: str | None, num_layers: int, pp_size: int
) -> list[tuple[int, int]]:
    """(start, end) layer range of every stage, for an explicit override string.

    ``partition`` is a comma-separated list of per-stage layer counts (the format of
    ``SGLANG_PP_LAYER_PARTITION``) or None for the even split, where the last
    ``num_layers % pp_size`` stages get one extra layer. ``pp_size == 1`` ignores the
    override.
    """
    _check_pp(0, pp_size)
    if pp_size == 1:
        partition = None
    if partition is not None:
        try:
            counts = [int(count) for count in partition.split(",")]
        except ValueError as err:
            raise ValueError(f"Invalid partition string: {partition}") from err
        if len(counts) != pp_size:
            raise ValueError(f"len(partitions)={len(counts)} does not match {pp_size=}.")
        if sum(counts) != num_layers:
            raise ValueError(f"sum(partitions)={sum(counts)} does not match {num_layers=}.")
        if any(count < 0 for count in counts):
            raise ValueError(f"Invalid partition string: {partition}")
    else:
        base, remainder = divmod(num_layers, pp_size)
        counts = [base + int(rank >= pp_size - remainder) for rank in range(pp_size)]
    ranges = []
    start = 0
    for count in counts:
        ranges.append((start, start + count))
        start += count
    return ranges


def layer_partition(num_layers: int, pp_size: int) -> list[tuple[int, int]]:
    """(start, end) of every stage, honouring ``SGLANG_PP_LAYER_PARTITION``."""
    return partition_from_string(os.environ.get(PP_LAYER_PARTITION_ENV), num_layers, pp_size)


def pp_layer_range(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """Layers ``[start, end)`` run by stage ``pp_rank`` (rule of ``get_pp_indices``)."""
    _check_pp(pp_rank, pp_size)
    return layer_partition(num_layers, pp_size)[pp_rank]


def _owner_in(layer_id: int, ranges: Sequence[tuple[int, int]]) -> int:
    for rank, (start, end) in enumerate(ranges):
        if start <= layer_id < end:
            return rank
    raise ValueError(f"layer {layer_id} is not owned by any stage of {list(ranges)}.")


def owner_stage(layer_id: int, num_layers: int, pp_size: int) -> int:
    """The stage whose layer range contains ``layer_id``."""
    return _owner_in(layer_id, layer_partition(num_layers, pp_size))


@dataclass(frozen=True)
class AuxCapturePlan:
    """Who captures what, where it travels, and in which order the last stage wants it.

    ``partition`` is filled from ``SGLANG_PP_LAYER_PARTITION`` (or the even split) when
    the plan is built, so later changes of the environment cannot change a live plan.
    """

    layer_ids: tuple[int, ...]
    num_layers: int
    pp_rank: int
    pp_size: int
    mode: str = "relay"
    partition: tuple[tuple[int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        ids = tuple(validate_layer_ids(list(self.layer_ids), self.num_layers))
        object.__setattr__(self, "layer_ids", ids)
        _check_pp(self.pp_rank, self.pp_size)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}.")
        if not self.partition:
            ranges = layer_partition(self.num_layers, self.pp_size)
        else:
            ranges = [(start, end) for start, end in self.partition]
            expected_start = 0
            for start, end in ranges:
                if start != expected_start or end < start:
                    raise ValueError(f"partition {ranges} is not contiguous.")
                expected_start = end
            if len(ranges) != self.pp_size or expected_start != self.num_layers:
                raise ValueError(
                    f"partition {ranges} does not cover {self.num_layers} layers "
                    f"on {self.pp_size} stages."
                )
        object.__setattr__(self, "partition", tuple(tuple(r) for r in ranges))

    @classmethod
    def build(
        cls,
        layer_ids: Any,
        num_layers: int,
        pp_rank: int,
        pp_size: int,
        mode: str = "relay",
        feature: str = DEFAULT_FEATURE,
    ) -> AuxCapturePlan:
        ids = validate_layer_ids(layer_ids, num_layers, feature=feature)
        return cls(tuple(ids), num_layers, pp_rank, pp_size, mode)

    @property
    def start_layer(self) -> int:
        return self.partition[self.pp_rank][0]

    @property
    def end_layer(self) -> int:
        return self.partition[self.pp_rank][1]

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def hops_to_last(self) -> int:
        return self.pp_size - 1 - self.pp_rank

    def owns(self, layer_id: int) -> bool:
        """Whether this stage captures ``layer_id`` (requested and run here)."""
        return layer_id in self._local_set

    def in_stage(self, layer_id: int) -> bool:
        """Whether ``layer_id`` runs on this stage (captured or not)."""
        return self.start_layer <= layer_id < self.end_layer

    def owner_of(self, layer_id: int) -> int:
        return _owner_in(layer_id, self.partition)

    def ids_of_stage(self, stage: int) -> list[int]:
        """Capture ids owned by ``stage``, in requested order."""
        start, end = self.partition[stage]
        return [i for i in self.layer_ids if start <= i < end]

    @property
    def local_layer_ids(self) -> list[int]:
        return self.ids_of_stage(self.pp_rank)

    @property
    def _local_set(self) -> frozenset:
        return frozenset(self.ids_of_stage(self.pp_rank))

    def sends_direct(self, stage: int) -> bool:
        """Whether ``stage`` sends its captures straight to the last rank."""
        return self.mode == "direct" and self.pp_size - 1 - stage >= 2

    def handoff_ids_after(self, stage: int) -> list[int]:
        """Capture ids the handoff leaving ``stage`` carries, sorted numerically."""
        if stage >= self.pp_size - 1:
            return []
        owners: Sequence[int] = range(stage + 1)
        if self.mode == "direct":
            owners = [s for s in owners if not self.sends_direct(s)]
        return sorted(i for s in owners for i in self.ids_of_stage(s))

    def incoming_ids(self, stage: int | None = None) -> list[int]:
        """Capture ids the handoff into ``stage`` (default: this one) carries."""
        stage = self.pp_rank if stage is None else stage
        return self.handoff_ids_after(stage - 1) if stage > 0 else []

    def proxy_hidden_size(self, hidden_size: int, stage: int | None = None) -> int:
        """Width of the ``AUX_ENTRY`` entry that ``stage`` (default: this one) receives;
        0 when it receives none. What a buffer for the entry is sized with."""
        return len(self.incoming_ids(stage)) * int(hidden_size)

    def direct_ids(self) -> list[tuple[int, int]]:
        """(stage, layer id) of every direct transfer, in the order both sides use:
        by stage, then numerically by layer id."""
        return [
            (stage, layer_id)
            for stage in range(self.pp_size)
            if self.sends_direct(stage)
            for layer_id in sorted(self.ids_of_stage(stage))
        ]

    def fingerprint(self) -> dict[str, Any]:
        return {
            "layer_ids": list(self.layer_ids),
            "num_layers": self.num_layers,
            "pp_size": self.pp_size,
            "partition": [list(r) for r in self.partition],
            "mode": self.mode,
        }
