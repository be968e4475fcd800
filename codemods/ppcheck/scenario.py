"""Scenarios of the PP validation, the scenario matrix, and the analytic wire bytes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from codemods.ppcheck.pp_aux_transport import (
    AUX_ENTRY,
    DEFAULT_FEATURE,
    AuxCapturePlan,
    partition_from_string,
)

DTYPE_SIZES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Scenario:
    """One pipeline run and what it must show.

    ``tokens`` lists the token count of every microbatch (their number is the number of
    microbatches). ``layer_ids=None`` switches capture off. ``partition`` is the value of
    ``SGLANG_PP_LAYER_PARTITION`` for the run. ``inflight`` is how many microbatches the
    first stage may have in flight (default ``world_size + 1``). ``expect`` is ``"equal"``
    (aux states equal to a PP=1 run, wire bytes and keys equal to the analytic values) or
    ``"error"`` (every rank raises ``ValueError`` at set-up, within 30 s).
    ``layer_ids_by_rank`` gives some ranks other ids (to provoke the handshake).
    ``fault`` selects a deliberately broken transport (see ``faults.py``). ``extra`` is
    passed on to the stage factory untouched.
    """

    name: str
    world_size: int
    mode: str
    num_layers: int
    layer_ids: tuple[int, ...] | None
    tokens: tuple[int, ...]
    hidden: int = 16
    dtype: str = "float32"
    partition: str | None = None
    inflight: int | None = None
    in_place: bool = False
    layer_ids_by_rank: tuple[tuple[int, Any], ...] = ()
    expect: str = "equal"
    fault: str | None = None
    light: bool = False
    verify: bool = True
    feature: str = DEFAULT_FEATURE
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def max_inflight(self) -> int:
        return self.inflight if self.inflight is not None else self.world_size + 1

    @property
    def itemsize(self) -> int:
        return DTYPE_SIZES[self.dtype]

    def ranges(self) -> list[tuple[int, int]]:
        return partition_from_string(self.partition, self.num_layers, self.world_size)

    def spec(self) -> dict[str, Any]:
        """The picklable description handed to the stage factory."""
        return {
            "name": self.name,
            "num_layers": self.num_layers,
            "layer_ids": None if self.layer_ids is None else list(self.layer_ids),
            "layer_ids_by_rank": {rank: ids for rank, ids in self.layer_ids_by_rank},
            "tokens": list(self.tokens),
            "hidden": self.hidden,
            "dtype": self.dtype,
            "mode": self.mode,
            "in_place": self.in_place,
            "fault": self.fault,
            "light": self.light,
            "feature": self.feature,
            **self.extra,
        }

    def label(self) -> str:
        return f"P={self.world_size} {self.mode} {self.name}"


@dataclass
class ScenarioResult:
    scenario: Scenario
    passed: bool
    status: str  # PASS | FAIL | HANG | ERROR
    detail: str
    seconds: float
    reports: dict[int, dict[str, Any]] = field(default_factory=dict)


# ------------------------------------------------------------------ analytic bytes
def expected_wire(scenario: Scenario) -> dict[str, Any]:
    """Bytes and keys the run must put on the wire, computed from the plan alone.

    Relay moves each capture once per hop between its stage and the last; direct moves
    it once (over the handoff from the stage next to the last, over the direct group
    from stages further away); 0-token microbatches move no tensor bytes.
    """
    world, ranges, item = scenario.world_size, scenario.ranges(), scenario.itemsize
    plan = None
    if scenario.layer_ids is not None:
        plan = AuxCapturePlan(
            tuple(scenario.layer_ids),
            scenario.num_layers,
            0,
            world,
            scenario.mode,
            partition=tuple(ranges),
        )
    aux = direct = base = 0
    keys: dict[int, list[str]] = {}
    for stage in range(world - 1):
        has_residual = ranges[stage][1] > 0
        stage_keys = ["hidden_states", "residual"]
        ids = plan.handoff_ids_after(stage) if plan else []
        stage_keys += [AUX_ENTRY] if ids else []
        keys[stage] = stage_keys
        for tokens in scenario.tokens:
            per_tensor = tokens * scenario.hidden * item
            base += per_tensor * (2 if has_residual else 1)
            aux += per_tensor * len(ids)
    direct_messages = 0
    if plan is not None:
        for tokens in scenario.tokens:
            direct += tokens * scenario.hidden * item * len(plan.direct_ids())
            if tokens * scenario.hidden > 0:  # a 0-token batch sends nothing
                direct_messages += len(plan.direct_ids())
    return {
        "aux_bytes": aux,
        "direct_bytes": direct,
        "direct_messages": direct_messages,
        "base_bytes": base,
        "keys": keys,
    }


# ------------------------------------------------------------------------- matrix
PlacementFn = Callable[[list[tuple[int, int]]], list[int] | None]


def _stage_layers(ranges, stage):
    start, end = ranges[stage]
    return list(range(start, end))


def _all_on(stage_of: Callable[[int], int]) -> PlacementFn:
    def place(ranges):
        layers = _stage_layers(ranges, stage_of(len(ranges)))
        return list(reversed(layers)) or None

    return place


def _one_per_stage(ranges):
    ids = [start + (end - start) // 2 for start, end in ranges if end > start]
    return list(reversed(ids))


def _boundaries(ranges):
    ids = []
    for start, end in ranges:
        for layer in (end - 1, start):
            if end > start and layer not in ids:
                ids.append(layer)
    return ids


def _final_layer(ranges):
    return [ranges[-1][1] - 1]


def _skip_stage_one(ranges):
    if len(ranges) < 3:
        return None
    ids = [end - 1 for stage, (start, end) in enumerate(ranges) if stage != 1 and end > start]
    return ids[::-1]


PLACEMENTS: dict[str, PlacementFn] = {
    "all-first-stage": _all_on(lambda world: 0),
    "all-middle-stage": _all_on(lambda world: 1 if world >= 3 else -1),
    "all-last-stage": _all_on(lambda world: world - 1),
    "one-per-stage": _one_per_stage,
    "stage-boundaries": _boundaries,
    "final-layer": _final_layer,
    "stage-1-without-capture": _skip_stage_one,
}

ENV_PARTITIONS = {2: "5,2", 3: "2,5,3", 4: "1,4,2,3"}
MIXED_TOKENS = (5, 1, 0, 5, 1, 5, 3, 2)


def partitions_for(world: int) -> list[tuple[str, int, str | None]]:
    env = ENV_PARTITIONS.get(world)
    result: list[tuple[str, int, str | None]] = [
        ("even", 3 * world, None),
        ("uneven", 4 * world - 1, None),
    ]
    if env is not None:
        result.append(("env " + env, sum(int(c) for c in env.split(",")), env))
    return result


def scenarios_for(world: int, mode: str) -> list[Scenario]:
    """Every scenario of one world size and one mode."""
    microbatches = world + 2
    mixed = MIXED_TOKENS[:microbatches]
    out: list[Scenario] = []

    def add(name, num_layers, ids, **kw):
        kw.setdefault("tokens", mixed)
        out.append(
            Scenario(
                name=name,
                world_size=world,
                mode=mode,
                num_layers=num_layers,
                layer_ids=None if ids is None else tuple(ids),
                **kw,
            )
        )

    for part_name, num_layers, env in partitions_for(world):
        ranges = partition_from_string(env, num_layers, world)
        for placement, place in PLACEMENTS.items():
            if placement == "all-middle-stage" and world < 3:
                continue
            ids = place(ranges)
            if ids:
                add(f"{placement} [{part_name}]", num_layers, ids, partition=env)

    even_layers = 3 * world
    even = partition_from_string(None, even_layers, world)
    for dtype in ("float32", "bfloat16"):
        for tokens, hidden in ((0, 16), (1, 16), (5, 16), (4096, 8)):
            add(
                f"{tokens} tokens {dtype}",
                even_layers,
                _boundaries(even),
                tokens=(tokens,) * microbatches,
                hidden=hidden,
                dtype=dtype,
            )
        add(f"in-place layers {dtype}", even_layers, _boundaries(even), dtype=dtype, in_place=True)
        add(f"capture off {dtype}", even_layers, None, dtype=dtype)
    add("ids past 9 in numeric order", 24, [11, 2, 10, 9, 23, 12])
    add("lockstep (1 in flight)", even_layers, _one_per_stage(even), inflight=1)
    add(
        "ids differ on last rank",
        even_layers,
        _one_per_stage(even),
        layer_ids_by_rank=((world - 1, list(reversed(_one_per_stage(even)))),),
        expect="error",
    )
    add(
        "invalid id on rank 0 only",
        even_layers,
        _one_per_stage(even),
        layer_ids_by_rank=((0, [even_layers]),),
        expect="error",
    )
    return out


def build_matrix(
    max_world_size: int = 4,
    modes: Sequence[str] = ("relay", "direct"),
    min_world_size: int = 2,
    select: str | None = None,
) -> list[Scenario]:
    """The whole matrix for world sizes ``min_world_size..max_world_size``."""
    matrix = [
        scenario
        for world in range(min_world_size, max_world_size + 1)
        for mode in modes
        for scenario in scenarios_for(world, mode)
    ]
    if select:
        matrix = [s for s in matrix if select in s.label()]
    return matrix


def with_fault(scenario: Scenario, fault: str) -> Scenario:
    return replace(scenario, fault=fault, name=f"{scenario.name} <{fault}>")
