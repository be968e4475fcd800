"""Pipeline-parallel support for the aux hidden-state capture of EAGLE3 / DFlash.

A model captures aux hidden states at the start of layer ``i`` for every ``i`` in
``layers_to_capture``.  Under pipeline parallelism a stage only runs its own layers,
so without help the last stage sees only the captures of its own layers.  With a
transport attached, every stage captures the layers it owns, the captures of earlier
stages travel to the last stage (in the PP handoff by default, or point-to-point with
``SGLANG_PP_AUX_TRANSPORT=direct``), and the last stage returns all of them in the
order a single-stage run returns them (ascending layer id).

Model code calls these functions:

* ``attach_pp_aux_transport(model, pp_group)`` at the end of a
  ``set_*_layers_to_capture`` hook, on every rank (``relay_only="<reason>"`` for a model
  whose forward needs every capture to pass through the next stage: it then refuses
  ``SGLANG_PP_AUX_TRANSPORT=direct`` when the hook is called);
* ``pp_aux_outgoing(model, aux_hidden_states, pp_proxy_tensors)`` on non-last stages,
  merged into the ``PPProxyTensors`` handed to the next stage;
* or ``pp_aux_handoff(model, handoff, aux_hidden_states, pp_proxy_tensors)``, which adds
  them to a ``PPProxyTensors`` built by ``residual_batch.to_pp``;
* ``pp_aux_collect(model, aux_hidden_states, pp_proxy_tensors, like)`` on the last
  stage, which returns the full set of captures;
* ``pp_aux_proxy_hidden_size(model)``: the width of the ``aux_hidden_states`` entry this
  stage receives (0: none), what the model's ``get_pp_proxy_aux_hidden_size`` reports so
  that the CUDA graph runners preallocate that entry like ``dspark_hidden_states``.

The captures of earlier stages travel in one ``aux_hidden_states`` entry of the
``PPProxyTensors``, side by side in ascending layer order; a missing entry, or one
of the wrong width or row count, raises on the receiving stage with the layers it
should hold.

Under PP=1, or before a hook is called, ``pp_aux_outgoing`` returns ``{}`` and
``pp_aux_collect`` returns its input unchanged.
"""

import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from sglang.srt.distributed.pp_aux_transport import PPAuxTransport, new_direct_group

PP_AUX_TRANSPORT_MODE_ENV = "SGLANG_PP_AUX_TRANSPORT"
#: How captures reach the last stage unless the environment variable says otherwise:
#: "relay" (in the PP handoff) or "direct" (point-to-point to the last rank).
DEFAULT_MODE = "relay"


def attach_pp_aux_transport(
    model: torch.nn.Module,
    pp_group: Any,
    ids_attr: str = "layers_to_capture",
    relay_only: str = "",
) -> None:
    """Attach the transport for the capture ids ``model.<ids_attr>`` to ``model``.

    ``model`` is the decoder stack (the module whose forward runs the layer loop).
    Every rank of the PP group calls this with the same capture layers.  Capture id
    ``i`` is taken in iteration ``i`` of the layer loop (at its start, or after the
    layer for raw layer ids), so it belongs to the stage that runs layer ``i``.

    The mode is ``SGLANG_PP_AUX_TRANSPORT`` (default ``DEFAULT_MODE``), read here, on
    every rank.  ``relay_only``: why ``model`` works in relay mode only; under PP any
    other mode then raises ``NotImplementedError`` naming the model and the reason,
    before any communication.
    """
    model.pp_aux_transport = None
    if pp_group.world_size == 1:
        return
    mode = os.environ.get(PP_AUX_TRANSPORT_MODE_ENV, DEFAULT_MODE)
    if relay_only and mode != "relay":
        raise NotImplementedError(
            f"{type(model).__name__} supports only {PP_AUX_TRANSPORT_MODE_ENV}=relay "
            f"for aux hidden state capture under PP ({relay_only}); got {mode!r}."
        )
    num_layers = _num_layers(model)
    # Ids outside [0, num_layers) are never reached by the layer loop, so a
    # single-stage run captures nothing for them; keep it that way.
    layer_ids = sorted(
        {int(i) for i in getattr(model, ids_attr) if 0 <= int(i) < num_layers}
    )
    if not layer_ids:
        return
    transport = PPAuxTransport.create(
        layer_ids,
        num_layers,
        pp_rank=pp_group.rank_in_group,
        pp_size=pp_group.world_size,
        hidden_size=_hidden_size(model),
        # Activations may run in another dtype than the checkpoint (--dtype), so the
        # dtype is not part of the agreement; receive buffers follow the hidden states.
        dtype=None,
        mode=mode,
        feature="aux hidden state capture",
        group=pp_group.cpu_group,
        direct_group=_direct_group(pp_group) if mode == "direct" else None,
        ranks=list(pp_group.ranks),
    )
    plan = transport.plan
    if (plan.start_layer, plan.end_layer) != (model.start_layer, model.end_layer):
        raise RuntimeError(
            f"PP stage {pp_group.rank_in_group} runs layers "
            f"[{model.start_layer}, {model.end_layer}) but the aux capture plan "
            f"expects [{plan.start_layer}, {plan.end_layer})."
        )
    model.pp_aux_transport = transport


_DIRECT_GROUPS: Dict[Tuple[int, ...], Any] = {}


def _direct_group(pp_group: Any) -> Any:
    """The dedicated group for direct sends among ``pp_group``'s ranks.

    ``new_group`` is collective over the whole world, so every rank creates the groups
    of all PP groups, in the same order (the layout ``initialize_model_parallel`` uses:
    PP group ``i`` holds ranks ``i, i + n, i + 2n, ...`` with ``n = world // pp_size``).
    """
    own = tuple(pp_group.ranks)
    if own not in _DIRECT_GROUPS:
        world_size = torch.distributed.get_world_size()
        num_groups = world_size // pp_group.world_size
        layouts = [tuple(range(i, world_size, num_groups)) for i in range(num_groups)]
        if own not in layouts:
            raise RuntimeError(
                f"PP group ranks {list(own)} do not follow the expected layout "
                f"{[list(r) for r in layouts]}; use SGLANG_PP_AUX_TRANSPORT=relay."
            )
        for ranks in layouts:
            _DIRECT_GROUPS[ranks] = new_direct_group(ranks)
    return _DIRECT_GROUPS[own]


def pp_aux_outgoing(
    model: torch.nn.Module,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
    boundaries: bool = False,
) -> Dict[str, torch.Tensor]:
    """Aux entries to add to the tensors handed to the next stage (non-last stage).

    ``boundaries``: the forward captures layer boundaries ``[start, end]`` of its stage
    (boundary ``i + 1`` after layer ``i``); boundary ``end`` is captured again, as its
    ``start``, by the next stage, so it is not handed on.
    """
    transport = getattr(model, "pp_aux_transport", None)
    if transport is None:
        return {}
    captures, _ = _local_captures(model, transport, aux_hidden_states, boundaries)
    return transport.outgoing(captures, _tensors_of(pp_proxy_tensors))


def pp_aux_handoff(
    model: torch.nn.Module,
    handoff: Any,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
) -> Any:
    """``handoff`` (the ``PPProxyTensors`` for the next stage) with this stage's aux
    entries added, for forwards that build it with ``residual_batch.to_pp``."""
    outgoing = pp_aux_outgoing(model, aux_hidden_states, pp_proxy_tensors)
    if outgoing:
        tensors = _tensors_of(handoff)
        clash = sorted(set(tensors) & set(outgoing))
        if clash:
            raise RuntimeError(f"PP handoff already holds the aux entries {clash}.")
        tensors.update(outgoing)
    return handoff


def pp_aux_collect(
    model: torch.nn.Module,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
    like: torch.Tensor,
    boundaries: bool = False,
    final: bool = False,
) -> Any:
    """All captures of all stages, in ascending layer order (last stage).

    ``final``: the last stage has also captured its output (id ``num_layers``, after
    its layers); that capture stays last.
    """
    transport = getattr(model, "pp_aux_transport", None)
    if transport is None or not transport.plan.is_last_stage:
        return aux_hidden_states
    captures, tail = _local_captures(
        model, transport, aux_hidden_states, boundaries, final
    )
    collected = transport.collect(captures, _tensors_of(pp_proxy_tensors), like=like)
    collected += tail
    if isinstance(aux_hidden_states, list):
        # The container the forward made (a list, or a subclass such as
        # AuxHiddenStateList), as a single-stage run returns it.
        return type(aux_hidden_states)(collected)
    # An append-compatible accumulator (e.g. AuxHiddenStatePacker): hand back one of
    # the same kind holding every capture.
    # Same capacity as the forward gave it: a last-rank capture may still follow.
    capacity = getattr(aux_hidden_states, "_num_captures", len(collected))
    packed = type(aux_hidden_states)(capacity)
    for tensor in collected:
        packed.append(tensor)
    return packed


def pp_aux_proxy_hidden_size(model: torch.nn.Module) -> int:
    """Width of the ``aux_hidden_states`` entry this stage receives; 0 without one
    (PP=1, the first stage, no capture before this stage, or no hook called yet)."""
    transport = getattr(model, "pp_aux_transport", None)
    if transport is None:
        return 0
    return transport.plan.proxy_hidden_size(transport.hidden_size or 0)


def _local_captures(
    model: torch.nn.Module,
    transport: Any,
    aux_hidden_states: Any,
    boundaries: bool,
    final: bool = False,
) -> Tuple[Dict[int, torch.Tensor], List[torch.Tensor]]:
    """This stage's captures by layer id, and the captures past the plan (the stage
    output, boundary ``num_layers``) that the last stage appends after the others.

    ``final``: the last stage captures its output after its layers when ``num_layers``
    is a capture id and the model takes that capture for this batch (some skip it for
    an empty batch, as a single-stage run does); it is then the one capture too many.
    """
    tensors = _captured_tensors(aux_hidden_states)
    plan = transport.plan
    tail: List[torch.Tensor] = []
    if (
        final
        and plan.is_last_stage
        and plan.end_layer in {int(i) for i in model.layers_to_capture}
        and len(tensors) == len(plan.local_layer_ids) + 1
    ):
        tail.append(tensors.pop())
    if boundaries and plan.end_layer in {int(i) for i in model.layers_to_capture}:
        if tensors:
            end_capture = tensors.pop()
            if plan.is_last_stage:
                tail.append(end_capture)
    layer_ids = sorted(plan.local_layer_ids)
    if len(tensors) != len(layer_ids):
        raise RuntimeError(
            f"PP stage {plan.pp_rank} captured {len(tensors)} aux hidden "
            f"states but owns capture layers {layer_ids}."
        )
    return dict(zip(layer_ids, tensors)), tail


def _captured_tensors(aux_hidden_states: Any) -> List[torch.Tensor]:
    if isinstance(aux_hidden_states, (list, tuple)):
        return list(aux_hidden_states)
    # AuxHiddenStatePacker keeps the captures side by side in one buffer.
    count = len(aux_hidden_states)
    if count == 0:
        return []
    width = aux_hidden_states._feature_size
    buffer = aux_hidden_states._buffer
    return [buffer[..., k * width : (k + 1) * width] for k in range(count)]


def _tensors_of(pp_proxy_tensors: Optional[Any]) -> Optional[Mapping[str, Any]]:
    if pp_proxy_tensors is None:
        return None
    return getattr(pp_proxy_tensors, "tensors", pp_proxy_tensors)


def _num_layers(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    num_layers = getattr(config, "num_hidden_layers", None)
    if num_layers is None:
        num_layers = len(model.layers)
    return int(num_layers)


def _hidden_size(model: torch.nn.Module) -> int:
    """The width of one capture: the stack's ``config.hidden_size``, else that of its
    own decoder layers (``hidden_size``, or their ``config.hidden_size``), for stacks
    that keep no ``config`` (e.g. ``GptOssModel``, ``MiniMaxM3Model``)."""
    holders = [getattr(model, "config", None)]
    for layer in getattr(model, "layers", None) or ():
        holders += [layer, getattr(layer, "config", None)]
    for holder in holders:
        size = getattr(holder, "hidden_size", None)
        if isinstance(size, int) and size > 0:
            return size
    raise RuntimeError(
        f"{type(model).__name__} has no config.hidden_size and none of its decoder "
        "layers has a hidden_size, so the width of its aux hidden state captures "
        "under PP is unknown."
    )
