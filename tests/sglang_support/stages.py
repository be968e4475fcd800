"""Build pipeline-stage instances of real SGLang model classes on CPU, without weights.

SGLang's own CPU tests build models by ``object.__new__(cls)`` + ``nn.Module.__init__`` and
then set the attributes ``__init__`` would have set; this module provides the stand-ins that
needs, generic over model families:

``FakePPGroup``          rank_in_group / world_size / is_first_rank / is_last_rank, plus the
                         process groups (``cpu_group``, ``device_group``) and global ``ranks``
                         that generated code hands to ``PPAuxTransport``.
``StampDecoderLayer``    stand-in decoder layer that keeps a residual stream and stamps its
                         layer id and the microbatch into the values, so any capture that is
                         misplaced, reordered, or from another microbatch differs exactly.
``StandInNorm``          final norm with SGLang's fused-residual calling convention.
``StandInEmbedding``     token embedding (first stage only).
``RecordingLogitsProcessor``  records the aux list it is handed, returns it.
``NullExpertRecorder``   ``get_global_expert_distribution_recorder()`` stand-in.
``bare(cls)``            an instance of ``cls`` with only ``nn.Module`` state.
``stage_layers``         the ``nn.ModuleList`` ``make_layers`` would give a stage: stand-in
                         layers for the stage's range, ``PPMissingLayer`` elsewhere.
``patch_globals``        replace module-level names (``get_pp_group``, the recorder) in the
                         model module.

All values are float64 with integer-valued or halved stamps, so equality with a PP=1 run is
checked with ``torch.equal``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

import torch
from torch import nn

DTYPE = torch.float64


class FakePPGroup:
    """The parts of SGLang's PP ``GroupCoordinator`` that model code reads."""

    def __init__(
        self,
        rank: int,
        size: int,
        *,
        cpu_group: Any = None,
        device_group: Any = None,
        ranks: list[int] | None = None,
    ) -> None:
        self.rank_in_group = rank
        self.world_size = size
        self.is_first_rank = rank == 0
        self.is_last_rank = rank == size - 1
        self.cpu_group = cpu_group
        self.device_group = device_group
        self.ranks = list(ranks) if ranks is not None else list(range(size))
        self.rank = self.ranks[rank]

    def __repr__(self) -> str:
        return f"FakePPGroup(rank={self.rank_in_group}, size={self.world_size})"

    @classmethod
    def for_transport(cls, rank: int, size: int, transport_kwargs: dict) -> FakePPGroup:
        """The group whose ``cpu_group``/``device_group``/``ranks`` are those of the
        transport arguments a stage runs with (``group``, ``direct_group``, ``ranks``)."""
        return cls(
            rank,
            size,
            cpu_group=transport_kwargs.get("group"),
            device_group=transport_kwargs.get("direct_group"),
            ranks=transport_kwargs.get("ranks"),
        )


def microbatch_of(forward_batch: Any) -> int:
    return int(getattr(forward_batch, "microbatch", 0))


class StampDecoderLayer(nn.Module):
    """``(hidden, residual) -> (residual * 0.5 + stamp, hidden + residual)``.

    Accepts SGLang's decoder-layer calling conventions: positional
    ``(positions, hidden_states, forward_batch, residual)`` or keywords, extra keywords
    (``zero_allocator``, ...) ignored.
    """

    def __init__(self, layer_id: int) -> None:
        super().__init__()
        self.layer_id = layer_id

    def forward(
        self, positions=None, hidden_states=None, forward_batch=None, residual=None, **kwargs
    ):
        residual = hidden_states if residual is None else hidden_states + residual
        stamp = (self.layer_id + 1) + 100.0 * microbatch_of(forward_batch)
        return residual * 0.5 + stamp, residual


class StandInNorm(nn.Module):
    """``norm(h) -> h * 2``; fused ``norm(h, r) -> (h + r, h + r)`` like SGLang's RMSNorm."""

    def forward(self, hidden_states, residual=None):
        if residual is None:
            return hidden_states * 2
        total = hidden_states + residual
        return total, total


class StandInEmbedding(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size

    def forward(self, input_ids):
        base = input_ids.to(DTYPE).unsqueeze(-1) * self.hidden_size
        return base + torch.arange(self.hidden_size, dtype=DTYPE)


class RecordingLogitsProcessor:
    """Stands in for ``LogitsProcessor``; remembers every aux list it was handed."""

    def __init__(self) -> None:
        self.calls: list[list[torch.Tensor] | None] = []

    def __call__(
        self,
        input_ids,
        hidden_states,
        lm_head,
        forward_batch,
        aux_hidden_states=None,
        *args,
        **kwargs,
    ):
        self.calls.append(aux_hidden_states)
        return SimpleNamespace(hidden_states=hidden_states, aux_hidden_states=aux_hidden_states)


class NullExpertRecorder:
    def with_current_layer(self, layer_id: int):
        return contextlib.nullcontext()

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: contextlib.nullcontext()


def bare(cls: type) -> Any:
    """An instance of the ``nn.Module`` subclass ``cls`` without running its ``__init__``."""
    obj = object.__new__(cls)
    nn.Module.__init__(obj)
    return obj


def stage_layers(
    num_layers: int,
    start: int,
    end: int,
    missing: Callable[[], nn.Module],
    layer: Callable[[int], nn.Module] = StampDecoderLayer,
) -> nn.ModuleList:
    return nn.ModuleList([layer(i) if start <= i < end else missing() for i in range(num_layers)])


def patch_globals(module: ModuleType, **values: Any) -> None:
    """Set module-level names of ``module`` (meant for stage processes, never restored)."""
    for name, value in values.items():
        setattr(module, name, value)


def embed_input(tokens: int, microbatch: int, hidden_size: int) -> torch.Tensor:
    """The first stage's input for one microbatch (distinct per microbatch and token)."""
    values = torch.arange(tokens * hidden_size, dtype=DTYPE).view(tokens, hidden_size)
    return values + 1000.0 * microbatch


def run_chain(stages: list[Any], token_counts: list[int], hidden_size: int):
    """Drive ``stages`` (stage objects of one pipeline, built in this process) over one
    microbatch per entry of ``token_counts``, passing each handoff dict to the next stage.

    For relay-mode transports, which only add entries to the handoff, this checks the
    model code without processes; the multi-process check uses ``codemods.ppcheck``.
    Returns ``[(hidden_states, aux_list)]`` per microbatch from the last stage.
    """
    results = []
    for mb, tokens in enumerate(token_counts):
        handoff = None
        hidden_in = embed_input(tokens, mb, hidden_size)
        for index, stage in enumerate(stages):
            out = stage.forward(mb, hidden_in if index == 0 else None, handoff)
            if index < len(stages) - 1:
                assert isinstance(out, dict), type(out)
                handoff = out
            else:
                results.append(out)
    return results


#: The handoff entry of the PP aux transport (``pp_aux_plan.AUX_ENTRY``).
AUX_ENTRY = "aux_hidden_states"


def dropping_aux(factory: Callable[..., Any]) -> Callable[..., Any]:
    """``factory`` whose stages hand on everything but the aux entry: the run that shows
    a missing entry raises.  Stages run in forked processes, so a closure is fine."""

    def make(spec, pp_rank, pp_size, transport_kwargs):
        stage = factory(spec, pp_rank, pp_size, transport_kwargs)
        forward = stage.forward

        def without_aux(mb, hidden_in, proxy):
            out = forward(mb, hidden_in, proxy)
            if isinstance(out, dict):
                return {k: v for k, v in out.items() if k != AUX_ENTRY}
            return out

        stage.forward = without_aux
        return stage

    return make
