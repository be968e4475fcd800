"""Aux hidden states captured for EAGLE3/DFLASH/DSPARK draft models, and carried across
pipeline stages."""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

# Aux hidden states under pipeline parallelism.
#
# Each stage captures the layers it runs.  A stage that is not the last hands the
# captures of every stage up to itself to the next one, side by side in the
# ``aux_hidden_states`` entry of its ``PPProxyTensors``; the last stage puts them before
# its own, so it returns the captures a single-stage run returns, in the same order.
# The CUDA graph runners preallocate the entry with the width that
# ``pp_aux_proxy_hidden_size`` reports.
#
# A model's ``set_*_layers_to_capture`` calls ``set_pp_aux_capture`` on every rank, with
# the width of the hidden states its decoder stack is built for; the stack's forward
# calls ``pp_aux_outgoing`` (or ``pp_aux_handoff``) before it returns the
# ``PPProxyTensors`` of a non-last stage.  A stack that packs its captures rebinds its
# ``AuxHiddenStatePacker`` to what ``pp_aux_seed`` returns right after making it: the
# received captures go into their final slots before the layers add their own (a
# non-last stage's packer is sized for the captures it hands on and its buffer is sent
# as it is; the last stage's ``finalize()`` returns every capture).  A stack that
# collects into a list calls ``pp_aux_collect`` after its layers on the last stage.
# Under PP=1 they leave everything as it is.
#
# Copies: the handoff carries one ``aux_hidden_states`` tensor, which ``recv`` allocates
# (or the CUDA graph runner preallocates) with the width the stage receives, so a stage
# cannot grow it in place: what it received is copied once into the tensor it sends,
# beside its own captures.  A packing stage writes both into its packer (the layers
# fill their slots directly) and sends that buffer, with no further copy; a list is
# concatenated once (a stage that takes no capture of its own sends the entry it
# received).  The last stage returns views of the received entry, except while
# a CUDA graph is captured (or traced by ``torch.compile`` for one), where the entry is
# the runner's static buffer, overwritten by the next replay, and each received capture
# is copied out once.
#
# What relays is the decoder stack's forward: its class declares the capture methods it
# relays in its own body (``pp_aux_relay_methods = ("EAGLE3",)``), as does the causal-LM
# class whose hooks set it up, for the server-argument validation
# (``relays_pp_aux_capture``); ``configure_aux_hidden_state_capture`` asks the stack a
# hook set up (``check_pp_aux_capture``): a wrapper that keeps a relaying stack passes.
AUX_ENTRY = "aux_hidden_states"
#: Set in a model class's own body: the capture methods whose captures it relays.
RELAY_METHODS_ATTR = "pp_aux_relay_methods"
# Deprecated, removed in the next release: a model written for the previous release's
# DSPARK relay (it defines this width method and relays DSPARK captures itself in the
# ``dspark_hidden_states`` entry, as Kimi-Linear did) is still admitted for DSPARK.
LEGACY_DSPARK_WIDTH = "get_pp_proxy_dspark_hidden_size"
# A runner that configures DSPARK's capture calls the DFLASH hook of a target that
# has no DSPARK hook.
DSPARK_HOOK = "set_dspark_layers_to_capture"
DFLASH_HOOK = "set_dflash_layers_to_capture"


def relays_pp_aux_capture(model_cls: type, method: str) -> bool:
    """Whether ``model_cls`` relays ``method``'s (EAGLE3, DFLASH, DSPARK) captures
    from every pipeline stage to the last.

    The declaration covers the class that makes it, and a subclass only while it keeps
    that class's decoder stack and hook: one that defines ``__init__``, ``forward`` or
    the method's hook itself must declare its own.  A runner that configures DSPARK's
    capture calls ``set_dflash_layers_to_capture`` on a target without
    ``set_dspark_layers_to_capture``, so such a class relays DSPARK where it relays
    DFLASH.  A class that defines
    ``get_pp_proxy_dspark_hidden_size`` relays DSPARK itself, as on the previous release
    (deprecated).
    """
    method = method.upper()
    if method == "DSPARK" and callable(getattr(model_cls, LEGACY_DSPARK_WIDTH, None)):
        return True
    if method == "DSPARK" and not hasattr(model_cls, DSPARK_HOOK):
        if hasattr(model_cls, DFLASH_HOOK):
            method = "DFLASH"
    hook = f"set_{method.lower()}_layers_to_capture"
    for klass in model_cls.__mro__:
        own = vars(klass)
        if RELAY_METHODS_ATTR in own:
            return method in own[RELAY_METHODS_ATTR]
        if "__init__" in own or "forward" in own or hook in own:
            return False
    return False


def check_pp_aux_capture(model: torch.nn.Module, method: str, pp_size: int) -> None:
    """Raise ``NotImplementedError``, naming the class, the method and why, right after
    ``method``'s capture hook ran under PP on a model that would lose the captures of
    the stages before the last (as the hooks do for a PP they do not support): unless
    the decoder stack the hook gave a relay (``set_pp_aux_capture``) still runs the
    ``forward`` of a class that declares ``method`` in its own body.  A model whose hook
    gave no stack a relay is asked by its class (``relays_pp_aux_capture``)."""
    if pp_size <= 1:
        return
    stacks = [m for m in model.modules() if "pp_aux_relay" in vars(m)]
    if not stacks and relays_pp_aux_capture(type(model), method):
        return
    for stack in stacks or [None]:
        reason = None if stack is None else _stack_refusal(stack, method.upper())
        if stack is None or reason is not None:
            name = type(model).__name__ + "'s decoder stack"
            name += "" if stack is None else f" {type(stack).__name__}"
            why = "" if reason is None else f" ({reason})"
            raise NotImplementedError(
                f"{name} does not relay {method}'s aux hidden states across pipeline "
                f"stages{why}, so pp_size={pp_size} would lose the captures of every "
                "stage but the last."
            )


def _stack_refusal(stack: torch.nn.Module, method: str) -> Optional[str]:
    """Why ``stack`` does not relay ``method``'s captures (None: it does)."""
    if "forward" in vars(stack):
        return "its forward is replaced on the instance"
    owner = next((k for k in type(stack).__mro__ if "forward" in vars(k)), None)
    declared = None if owner is None else vars(owner).get(RELAY_METHODS_ATTR)
    if declared is None:
        owner_name = getattr(owner, "__name__", "?")
        return f"{owner_name}.forward is not patched to relay captures"
    if not declared:
        return f"{owner.__name__}.forward relays no capture method"
    if method not in declared:
        return f"{owner.__name__}.forward relays only {', '.join(declared)}"
    return None


@dataclass(frozen=True)
class PPAuxRelay:
    """The captures one stage receives, takes and hands on."""

    received_layer_ids: List[int]
    local_layer_ids: List[int]
    hidden_size: int
    #: The forward may also capture after the stage's last layer (id ``end_layer``).
    takes_end: bool
    is_last_stage: bool

    def outgoing(
        self, captures: Mapping[int, torch.Tensor], incoming: Optional[Mapping]
    ) -> Dict[str, torch.Tensor]:
        """The entry for the next stage: what this stage received, then its own, in
        one new tensor (the received entry cannot grow in place): one copy each.  A
        stage that takes none hands the received entry on as it is, unless it is the
        CUDA graph runner's static buffer."""
        received, local = self._received(incoming), self._local(captures)
        if received and not local and not _handoff_buffer_reused():
            return {AUX_ENTRY: received[0]}
        tensors = received + local
        if not tensors:
            return {}
        return {AUX_ENTRY: torch.cat(tensors, dim=-1)}

    def handed_on(self, packer: Any) -> Dict[str, torch.Tensor]:
        """The entry for the next stage from a packer ``pp_aux_seed`` filled with the
        received captures before the layers added this stage's: its buffer as it is
        when the packer holds exactly those (the packer ``pp_aux_seed`` made), else a
        contiguous copy of them."""
        count = self.num_handed_on
        if len(packer) != count:
            raise RuntimeError(
                f"PP stage packed {len(packer)} aux hidden states but hands on "
                f"{count} (layers {self.received_layer_ids + self.local_layer_ids})."
            )
        if not count:
            return {}
        return {AUX_ENTRY: packer.captured().contiguous()}

    @property
    def num_handed_on(self) -> int:
        """How many captures a non-last stage hands on: received, then its own."""
        return len(self.received_layer_ids) + len(self.local_layer_ids)

    def collect(
        self, captures: Mapping[int, torch.Tensor], incoming: Optional[Mapping]
    ) -> List[torch.Tensor]:
        """Every capture in layer order (views of the incoming entry first)."""
        return self.received(incoming) + self._local(captures)

    def received(self, incoming: Optional[Mapping]) -> List[torch.Tensor]:
        """The earlier stages' captures in layer order: views of the incoming entry."""
        received = self._received(incoming)
        return list(received[0].split(self.hidden_size, dim=-1)) if received else []

    def _local(self, captures: Mapping[int, torch.Tensor]) -> List[torch.Tensor]:
        if sorted(captures) != self.local_layer_ids:
            raise RuntimeError(
                f"PP stage took aux captures at layers {sorted(captures)} but owns "
                f"capture layers {self.local_layer_ids}."
            )
        return [captures[i] for i in self.local_layer_ids]

    def _received(self, incoming: Optional[Mapping]) -> List[torch.Tensor]:
        entry = None if incoming is None else incoming.get(AUX_ENTRY)
        layers = self.received_layer_ids
        width = len(layers) * self.hidden_size
        if entry is None and layers:
            raise RuntimeError(
                f"the PP handoff has no '{AUX_ENTRY}' entry, so the aux captures of "
                f"layers {layers} are missing."
            )
        if entry is not None and entry.shape[-1] != width:
            raise RuntimeError(
                f"the PP handoff's '{AUX_ENTRY}' entry is {entry.shape[-1]} wide, but "
                f"earlier stages capture layers {layers} ({width} wide)."
            )
        return [] if entry is None else [entry]


def set_pp_aux_capture(
    model: torch.nn.Module,
    pp_group: Any,
    ids_attr: str = "layers_to_capture",
    *,
    hidden_size: int,
) -> None:
    """Make the decoder stack ``model`` carry the captures at ``model.<ids_attr>``,
    each ``hidden_size`` wide (the hidden size of the config the stack is built from).
    Called on every rank by the capture hooks."""
    model.pp_aux_relay = None
    if pp_group.world_size == 1:
        return
    ids = {int(i) for i in getattr(model, ids_attr)}
    # The layer loop never reaches other ids, so PP=1 captures nothing for them.
    taken = sorted(i for i in ids if 0 <= i < _num_layers(model))
    start, end = model.start_layer, model.end_layer
    if taken:
        model.pp_aux_relay = PPAuxRelay(
            received_layer_ids=[i for i in taken if i < start],
            local_layer_ids=[i for i in taken if start <= i < end],
            hidden_size=int(hidden_size),
            takes_end=end in ids,
            is_last_stage=pp_group.is_last_rank,
        )


def pp_aux_outgoing(
    model: torch.nn.Module,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
    boundaries: bool = False,
) -> Dict[str, torch.Tensor]:
    """The aux entry a non-last stage adds to the tensors for the next stage.

    ``boundaries``: the forward also captured boundary ``end_layer`` (after its last
    layer), which the next stage captures again as its first.
    """
    relay = getattr(model, "pp_aux_relay", None)
    if relay is None:
        return {}
    incoming = _tensors_of(pp_proxy_tensors)
    if _seeded(relay, aux_hidden_states):
        relay._received(incoming)  # the same checks of the received entry
        return relay.handed_on(aux_hidden_states)
    captures, _ = _by_layer(relay, aux_hidden_states, boundaries)
    return relay.outgoing(captures, incoming)


def pp_aux_handoff(
    model: torch.nn.Module,
    handoff: Any,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
) -> Any:
    """``handoff`` (the ``PPProxyTensors`` for the next stage) with the aux entry."""
    handoff.tensors.update(pp_aux_outgoing(model, aux_hidden_states, pp_proxy_tensors))
    return handoff


def pp_aux_seed(
    model: torch.nn.Module, aux_hidden_states: Any, pp_proxy_tensors: Optional[Any]
) -> Any:
    """The packer a stage's layers capture into, with the earlier stages' captures
    already in their final slots, each copied once; called right after the stack makes
    its empty ``AuxHiddenStatePacker``, whose name is bound to what it returns.

    On the last stage that packer itself (in the runner's buffer where ``for_batch``
    gave one): ``finalize()`` returns what a single-stage run returns.  On a stage that
    is not the last a new packer of the same class, sized for the captures it hands on
    (what it received, then its own) rather than for every capture id: its buffer is
    the entry ``pp_aux_outgoing`` sends, as it is.  (A packer allocates its buffer at
    its first capture, so the one it replaces has allocated nothing.)  A list or
    ``None`` is returned as it is."""
    relay = getattr(model, "pp_aux_relay", None)
    if relay is None:
        return aux_hidden_states
    if aux_hidden_states is None or isinstance(aux_hidden_states, list):
        return aux_hidden_states
    if len(aux_hidden_states):
        raise RuntimeError(
            f"the aux hidden state packer already holds {len(aux_hidden_states)} "
            "captures, but the earlier stages' captures come first."
        )
    if not relay.is_last_stage:
        aux_hidden_states = type(aux_hidden_states)(relay.num_handed_on)
    for capture in relay.received(_tensors_of(pp_proxy_tensors)):
        aux_hidden_states.append(capture)
    return aux_hidden_states


def pp_aux_collect(
    model: torch.nn.Module,
    aux_hidden_states: Any,
    pp_proxy_tensors: Optional[Any],
    boundaries: bool = False,
    final: bool = False,
) -> Any:
    """The captures of every stage in layer order, in a list of the forward's kind
    (last stage).  ``final``: the last stage also captured its output, which stays last.
    An ``AuxHiddenStatePacker`` is returned as it is: ``pp_aux_seed`` filled it.
    """
    relay = getattr(model, "pp_aux_relay", None)
    if relay is None or not relay.is_last_stage:
        return aux_hidden_states
    if not isinstance(aux_hidden_states, list):
        return aux_hidden_states
    captures, tail = _by_layer(relay, aux_hidden_states, boundaries, final)
    tensors = relay.collect(captures, _tensors_of(pp_proxy_tensors)) + tail
    if _handoff_buffer_reused():
        # The received views borrow the runner's static buffer: one copy each.
        received = len(relay.received_layer_ids)
        tensors = [t.clone() for t in tensors[:received]] + tensors[received:]
    return type(aux_hidden_states)(tensors)


def pp_aux_proxy_hidden_size(model: torch.nn.Module) -> int:
    """Width of the aux entry this stage of ``model`` receives (0: none): from the relay
    ``set_pp_aux_capture`` gave its decoder stack, ``model`` itself or a submodule at
    any depth (a VL model's language model)."""
    relays = [
        relay
        for module in model.modules()
        if (relay := vars(module).get("pp_aux_relay")) is not None
    ]
    if len(relays) > 1:
        raise RuntimeError(
            f"{type(model).__name__} has {len(relays)} decoder stacks that relay aux "
            "hidden states, but the PP handoff has one aux entry."
        )
    return sum(len(relay.received_layer_ids) * relay.hidden_size for relay in relays)


def _by_layer(
    relay: PPAuxRelay, aux_hidden_states: Any, boundaries: bool, final: bool = False
) -> Tuple[Dict[int, torch.Tensor], List[torch.Tensor]]:
    """This stage's captures by layer id, and those the last stage appends after every
    other (its output, boundary ``num_layers``)."""
    if isinstance(aux_hidden_states, list):
        tensors = list(aux_hidden_states)
    elif len(aux_hidden_states):
        tensors = list(aux_hidden_states.captured().split(relay.hidden_size, dim=-1))
    else:
        tensors = []
    tail = []
    if (
        final
        and relay.is_last_stage
        and relay.takes_end
        and len(tensors) == len(relay.local_layer_ids) + 1
    ):
        tail.append(tensors.pop())
    if boundaries and relay.takes_end and tensors:
        end_capture = tensors.pop()
        if relay.is_last_stage:
            tail.append(end_capture)
    if len(tensors) != len(relay.local_layer_ids):
        raise RuntimeError(
            f"PP stage took {len(tensors)} aux hidden states but owns capture layers "
            f"{relay.local_layer_ids}."
        )
    return dict(zip(relay.local_layer_ids, tensors)), tail


def _seeded(relay: PPAuxRelay, aux_hidden_states: Any) -> bool:
    """A packer ``pp_aux_seed`` filled on a stage that received captures (or any packer
    of a stage that received none): it holds what the stage hands on."""
    if aux_hidden_states is None or isinstance(aux_hidden_states, list):
        return False
    return len(aux_hidden_states) == relay.num_handed_on


def _handoff_buffer_reused() -> bool:
    """Whether the received entry is a buffer the next forward overwrites: the CUDA
    graph runner's static one, read while a graph is captured or traced for one by
    ``torch.compile`` (eager forwards get a fresh entry from ``recv`` each time)."""
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _tensors_of(pp_proxy_tensors: Optional[Any]) -> Optional[Mapping]:
    if pp_proxy_tensors is None:
        return None
    return getattr(pp_proxy_tensors, "tensors", pp_proxy_tensors)


def _num_layers(model: torch.nn.Module) -> int:
    num_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    return int(len(model.layers) if num_layers is None else num_layers)
