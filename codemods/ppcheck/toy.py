"""A toy decoder split into pipeline stages, and helpers for any stage factory.

Each layer stamps its layer id and the microbatch id into the values and keeps a residual
stream, so a capture taken from the wrong layer, delivered in the wrong order or matched
with another microbatch changes the numbers::

    residual = hidden (first layer) | residual + hidden
    hidden   = sin(residual * w[layer] * 0.25) + (layer + 1) / 8 + (mb + 1) / 64
    capture  = hidden + residual

``w[layer]`` varies along the hidden dimension. ``in_place`` computes the same values by
modifying the layer inputs in place; ``light`` (benchmarks) replaces the layer by
``hidden + stamp`` so that compute does not drown the transport.
"""

from __future__ import annotations

from typing import Any

import torch

from codemods.ppcheck.pp_aux_transport import (
    DEFAULT_FEATURE,
    AuxCapturePlan,
    PPAuxTransport,
    pp_layer_range,
)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def default_input(spec: dict, mb: int, device: Any = "cpu") -> torch.Tensor:
    """Deterministic first-stage input of microbatch ``mb``: ``[tokens, hidden]``."""
    tokens, hidden = spec["tokens"][mb], spec["hidden"]
    rows = torch.arange(tokens, dtype=torch.int64).unsqueeze(1)
    cols = torch.arange(hidden, dtype=torch.int64).unsqueeze(0)
    values = ((rows * 31 + cols * 7 + mb * 13) % 17).to(torch.float32) / 8 - 1
    return values.to(dtype=torch_dtype(spec["dtype"]), device=device)


def make_transport(
    spec: dict,
    pp_rank: int,
    pp_size: int,
    transport_kwargs: dict,
    *,
    hidden_size: int,
    dtype: torch.dtype,
    transport_cls: type[PPAuxTransport] = PPAuxTransport,
) -> PPAuxTransport | None:
    """Build (and handshake) the transport a stage should use, or None if capture is off.

    Honours ``spec["layer_ids_by_rank"]`` (per-rank ids, to provoke the handshake). Every
    rank must call it, as it is collective on ``transport_kwargs["group"]``.
    """
    layer_ids = spec.get("layer_ids_by_rank", {}).get(pp_rank, spec.get("layer_ids"))
    if layer_ids is None and not spec.get("layer_ids_by_rank"):
        return None
    mode = transport_kwargs.get("mode", spec.get("mode", "relay"))
    if spec.get("handshake_method"):  # build the plan, then call handshake() itself
        plan = AuxCapturePlan.build(
            layer_ids,
            spec["num_layers"],
            pp_rank,
            pp_size,
            mode,
            spec.get("feature", DEFAULT_FEATURE),
        )
        transport = transport_cls(
            plan,
            group=transport_kwargs.get("group"),
            direct_group=transport_kwargs.get("direct_group"),
            ranks=transport_kwargs.get("ranks"),
        )
        transport.handshake(hidden_size, dtype)
        return transport
    return transport_cls.create(
        layer_ids,
        spec["num_layers"],
        pp_rank=pp_rank,
        pp_size=pp_size,
        hidden_size=hidden_size,
        dtype=dtype,
        mode=mode,
        feature=spec.get("feature", DEFAULT_FEATURE),
        group=transport_kwargs.get("group"),
        direct_group=transport_kwargs.get("direct_group"),
        ranks=transport_kwargs.get("ranks"),
    )


class ToyStage:
    """One pipeline stage of the toy decoder (see the module docstring)."""

    def __init__(self, spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict):
        from codemods.ppcheck.faults import transport_class

        self.spec = spec
        self.pp_rank, self.pp_size = pp_rank, pp_size
        self.device = torch.device(transport_kwargs.get("device", "cpu"))
        self.dtype = torch_dtype(spec["dtype"])
        self.in_place = bool(spec.get("in_place"))
        self.light = bool(spec.get("light"))
        self.transport = make_transport(
            spec,
            pp_rank,
            pp_size,
            transport_kwargs,
            hidden_size=spec["hidden"],
            dtype=self.dtype,
            transport_cls=transport_class(spec.get("fault")),
        )
        if self.transport is not None:
            self.start, self.end = self.transport.plan.start_layer, self.transport.plan.end_layer
        else:
            self.start, self.end = pp_layer_range(spec["num_layers"], pp_rank, pp_size)
        columns = torch.arange(spec["hidden"], dtype=torch.float32)
        self.weights = {
            layer: (1 + 0.125 * ((columns + layer) % 7)).to(self.dtype).to(self.device)
            for layer in range(self.start, self.end)
        }

    @property
    def is_last(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    def make_input(self, mb: int) -> torch.Tensor:
        return default_input(self.spec, mb, self.device)

    def _layer(self, layer, mb, hidden, residual):
        stamp = (layer + 1) / 8 + (mb + 1) / 64
        if self.light:
            residual = hidden if residual is None else residual
            return hidden + stamp, residual
        if self.in_place:
            if residual is None:
                residual = hidden.clone()
            else:
                residual.add_(hidden)
            hidden.copy_(residual).mul_(self.weights[layer]).mul_(0.25).sin_().add_(stamp)
            return hidden, residual
        residual = hidden if residual is None else residual + hidden
        hidden = (residual * self.weights[layer] * 0.25).sin() + stamp
        return hidden, residual

    def forward(self, mb: int, hidden_in: torch.Tensor | None, proxy: dict | None):
        if self.pp_rank == 0:
            if hidden_in is None:
                raise ValueError("stage 0 needs its input")
            hidden, residual = hidden_in, None
        else:
            if proxy is None:
                raise ValueError(f"stage {self.pp_rank} needs the handoff of the stage before")
            hidden, residual = proxy["hidden_states"], proxy["residual"]
        transport = self.transport
        captures = {}
        for layer in range(self.start, self.end):
            hidden, residual = self._layer(layer, mb, hidden, residual)
            if transport is not None and transport.plan.owns(layer):
                captures[layer] = hidden + residual
        if not self.is_last:
            out = {"hidden_states": hidden, "residual": residual}
            if transport is not None:
                out.update(transport.outgoing(captures, proxy))
            return out
        if transport is None:
            return hidden, []
        return hidden, transport.collect(captures, proxy, like=hidden)

    def flush(self) -> None:
        if self.transport is not None:
            self.transport.flush()


def toy_stage_factory(spec: dict, pp_rank: int, pp_size: int, transport_kwargs: dict):
    """The default stage factory: a :class:`ToyStage`."""
    return ToyStage(spec, pp_rank, pp_size, transport_kwargs)
