"""The runtime the upstream patch ships (``shipped/pp_aux_capture.py``), in one process.

The module needs nothing from SGLang, so it runs here as written into a release without
``aux_hidden_states.py``.  Stages are decoder stacks of a 4-layer model on 2 or 3 stages;
a stage's handoff is the dict the next stage receives; the hook passes the width.
``test_upstream_width_real_init.py`` checks the width on the real model classes of a
patched release, and the family tests drive real forwards.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

NUM_LAYERS = 4
HIDDEN = 8
TOKENS = 3


class _Layer(torch.nn.Module):
    def __init__(self, hidden_size=None, config=None):
        super().__init__()
        if hidden_size is not None:
            self.hidden_size = hidden_size
        if config is not None:
            self.config = config


class Stack(torch.nn.Module):
    """A decoder stack running layers ``[start, end)`` of ``NUM_LAYERS``."""

    def __init__(self, start, end, layers=None, config=None, ids=(1, 3)):
        super().__init__()
        if config is not None:
            self.config = config
        self.start_layer, self.end_layer = start, end
        self.layers = torch.nn.ModuleList(layers or [_Layer() for _ in range(NUM_LAYERS)])
        self.layers_to_capture = list(ids)


def _group(rank, size):
    return SimpleNamespace(world_size=size, is_last_rank=rank == size - 1)


def _config():
    return SimpleNamespace(hidden_size=HIDDEN, num_hidden_layers=NUM_LAYERS)


def _stages(glue, bounds, ids):
    stacks = []
    for rank, (start, end) in enumerate(bounds):
        stack = Stack(start, end, config=_config(), ids=ids)
        glue.set_pp_aux_capture(stack, _group(rank, len(bounds)), hidden_size=HIDDEN)
        stacks.append(stack)
    return stacks


def _capture(layer_id):
    return torch.full((TOKENS, HIDDEN), float(layer_id))


def _own(stack, ids):
    """The captures a stage takes itself, in layer order (its output, id ``NUM_LAYERS``,
    on the last stage)."""
    last = stack.end_layer == NUM_LAYERS
    return [
        _capture(i)
        for i in sorted(ids)
        if stack.start_layer <= i < stack.end_layer or (last and i == NUM_LAYERS)
    ]


def _handoffs(glue, stacks, ids, collector=list):
    """What the last of ``stacks`` receives once every earlier stage captured its ids."""
    incoming = None
    for stack in stacks[:-1]:
        aux = collector()
        for capture in _own(stack, ids):
            aux.append(capture)
        handoff = SimpleNamespace(tensors={"hidden_states": torch.zeros(TOKENS, HIDDEN)})
        incoming = glue.pp_aux_handoff(stack, handoff, aux, incoming).tensors
    return incoming


def _run(glue, bounds, ids, collector=list):
    """Every stage captures its own ids in order, as a rewritten forward does (the last
    seeds its collector right after making it, and gathers after its layers); returns the
    last stage's collection."""
    stacks = _stages(glue, bounds, ids)
    incoming = _handoffs(glue, stacks, ids, collector)
    stack = stacks[-1]
    aux = collector()
    glue.pp_aux_seed(stack, aux, incoming)
    for capture in _own(stack, ids):
        aux.append(capture)
    return stack, glue.pp_aux_collect(stack, aux, incoming), incoming


@pytest.mark.parametrize("bounds", [[(0, 2), (2, 4)], [(0, 1), (1, 3), (3, 4)], [(0, 3), (3, 4)]])
@pytest.mark.parametrize("ids", [[1, 3], [0, 1, 2], [3], [0, 2, 3]])
def test_the_last_stage_returns_every_capture_in_layer_order(glue, bounds, ids):
    stack, collected, incoming = _run(glue, bounds, ids)
    assert [int(t[0, 0]) for t in collected] == sorted(ids)
    earlier = [i for i in ids if i < stack.start_layer]
    entry = (incoming or {}).get("aux_hidden_states")
    width = 0 if entry is None else entry.shape[-1]
    # The width the last stage reports for its CUDA-graph buffer is the entry's.
    assert glue.pp_aux_proxy_hidden_size(stack) == width == HIDDEN * len(earlier)


def _capturing_a_graph(monkeypatch):
    """As while the CUDA graph runner captures: the received entry is its static buffer."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


def test_received_captures_are_views_of_a_fresh_entry_in_an_eager_forward(glue):
    _, collected, incoming = _run(glue, [(0, 2), (2, 4)], [1, 3])
    entry = incoming["aux_hidden_states"]
    assert collected[0].untyped_storage().data_ptr() == entry.untyped_storage().data_ptr()


def test_received_captures_are_copies_of_the_static_buffer_while_a_graph_is_captured(
    glue, monkeypatch
):
    _capturing_a_graph(monkeypatch)
    _, collected, incoming = _run(glue, [(0, 2), (2, 4)], [1, 3])
    incoming["aux_hidden_states"].zero_()  # the next replay overwrites it
    assert int(collected[0][0, 0]) == 1


class AuxList(list):
    """A list subclass, as SGLang's ``AuxHiddenStateList``: the kind is kept."""


class Packer:
    """As SGLang's ``AuxHiddenStatePacker``: one ``[tokens, K * hidden]`` buffer (``out``,
    or made at the first capture), each capture copied into the next slot."""

    def __init__(self, num_captures, out=None):
        self.num_captures, self.buffer, self.taken = num_captures, out, 0

    def append(self, tensor):
        width = tensor.shape[-1]
        if self.buffer is None:
            self.buffer = tensor.new_empty((*tensor.shape[:-1], width * self.num_captures))
        self.buffer[..., self.taken * width : (self.taken + 1) * width].copy_(tensor)
        self.taken += 1

    def __len__(self):
        return self.taken

    def captured(self):
        return self.buffer[..., : self.taken * HIDDEN]

    def finalize(self):
        if self.taken != self.num_captures:
            raise RuntimeError(f"captured {self.taken} of {self.num_captures} aux hidden states")
        return self.buffer


class CountCopies(TorchDispatchMode):
    """Counts the ATen calls that copy tensor data, by name (``aten::copy_`` ...)."""

    COPIES = ("aten::copy_", "aten::clone", "aten::cat", "aten::_to_copy")

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in self.COPIES:
            self.counts[func._schema.name] += 1
        return func(*args, **(kwargs or {}))


def test_the_collector_kind_is_kept(glue):
    _, collected, _ = _run(glue, [(0, 2), (2, 4)], [1, 3], collector=AuxList)
    assert type(collected) is AuxList
    _, packed, _ = _run(glue, [(0, 1), (1, 3), (3, 4)], [0, 1, 3], collector=lambda: Packer(3))
    assert isinstance(packed, Packer)
    finalized = packed.finalize()
    assert finalized.shape == (TOKENS, 3 * HIDDEN)
    assert [int(finalized[0, k * HIDDEN]) for k in range(3)] == [0, 1, 3]


#: Captures on every stage of 3; and with the last stage's output (id ``NUM_LAYERS``).
PACKED_IDS = [[0, 1, 2, 3], [0, 2, 3, NUM_LAYERS]]


@pytest.mark.parametrize("ids", PACKED_IDS)
@pytest.mark.parametrize("preallocated", [False, True], ids=["own-buffer", "out-buffer"])
def test_the_last_stage_copies_each_capture_once_into_its_own_packer(glue, ids, preallocated):
    stacks = _stages(glue, [(0, 1), (1, 3), (3, 4)], ids)
    incoming = _handoffs(glue, stacks, ids, collector=lambda: Packer(len(ids)))
    last = stacks[-1]
    own = _own(last, ids)
    # ``for_batch``: the packer writes into the CUDA-graph runner's buffer.
    out = torch.full((TOKENS, len(ids) * HIDDEN), -1.0) if preallocated else None
    packer = Packer(len(ids), out=out)
    with CountCopies() as counted:
        glue.pp_aux_seed(last, packer, incoming)
        for capture in own:
            packer.append(capture)
        collected = glue.pp_aux_collect(last, packer, incoming)
        packed = collected.finalize()
    assert collected is packer
    assert packed is packer.buffer and (out is None or packed is out)
    # One copy per capture, into its final slot: none rebuilt, none gathered twice.
    assert counted.counts == {"aten::copy_": len(ids)}
    assert [int(packed[0, k * HIDDEN]) for k in range(len(ids))] == sorted(ids)
    assert bool((packed == packed[:, ::HIDDEN].repeat_interleave(HIDDEN, dim=1)).all())


def test_a_packer_is_seeded_before_it_captures(glue):
    stacks = _stages(glue, [(0, 2), (2, 4)], [1, 3])
    incoming = _handoffs(glue, stacks, [1, 3])
    packer = Packer(2)
    packer.append(_capture(3))
    with pytest.raises(RuntimeError, match="already holds 1 captures"):
        glue.pp_aux_seed(stacks[-1], packer, incoming)
    # A non-last stage, ``None`` (no capture) and PP=1 are left alone.
    empty = Packer(2)
    glue.pp_aux_seed(stacks[0], empty, None)
    glue.pp_aux_seed(stacks[-1], None, incoming)
    single = Stack(0, 4, config=_config())
    glue.set_pp_aux_capture(single, _group(0, 1), hidden_size=HIDDEN)
    glue.pp_aux_seed(single, empty, None)
    assert len(empty) == 0


@pytest.mark.parametrize("capturing", [None, "graph", "compile"])
def test_the_list_path_copies_received_captures_only_out_of_a_reused_buffer(
    glue, monkeypatch, capturing
):
    """Eager: views of the fresh entry; a CUDA graph captured (or traced by
    ``torch.compile``) reads the runner's static buffer: one copy of each."""
    ids = [0, 1, 2, 3, NUM_LAYERS]
    stacks = _stages(glue, [(0, 1), (1, 3), (3, 4)], ids)
    incoming = _handoffs(glue, stacks, ids)
    last = stacks[-1]
    own = _own(last, ids)
    if capturing == "graph":
        _capturing_a_graph(monkeypatch)
    elif capturing == "compile":
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with CountCopies() as counted:
        glue.pp_aux_seed(last, own, incoming)  # a list: left for the gathering
        collected = glue.pp_aux_collect(last, list(own), incoming, final=True)
    assert counted.counts == ({"aten::clone": 3} if capturing else {})
    assert [int(t[0, 0]) for t in collected] == ids
    assert all(got is mine for got, mine in zip(collected[3:], own, strict=True))


@pytest.mark.parametrize("bounds", [[(0, 1), (1, 3), (3, 4)], [(0, 1), (1, 2), (2, 3), (3, 4)]])
def test_a_packing_stage_hands_on_its_packer_with_one_copy_per_capture(glue, bounds):
    """Each non-last stage packs what it received and its own captures, each copied once,
    into a packer sized for them, and sends its buffer: no concatenation."""
    ids = [0, 1, 2, 3]
    stacks = _stages(glue, bounds, ids)
    incoming = None
    for stack in stacks[:-1]:
        made = Packer(len(ids))
        with CountCopies() as counted:
            aux = glue.pp_aux_seed(stack, made, incoming)
            for capture in _own(stack, ids):
                aux.append(capture)
            entry = glue.pp_aux_outgoing(stack, aux, incoming)["aux_hidden_states"]
        handed_on = sum(i < stack.end_layer for i in ids)
        assert aux is not made and aux.num_captures == handed_on
        assert counted.counts == {"aten::copy_": handed_on}
        assert entry.data_ptr() == aux.finalize().data_ptr()  # the buffer itself
        incoming = {"hidden_states": torch.zeros(TOKENS, HIDDEN), "aux_hidden_states": entry}
    last = stacks[-1]
    made = Packer(len(ids))
    aux = glue.pp_aux_seed(last, made, incoming)
    for capture in _own(last, ids):
        aux.append(capture)
    assert aux is made
    packed = glue.pp_aux_collect(last, aux, incoming).finalize()
    assert [int(packed[0, k * HIDDEN]) for k in range(len(ids))] == ids


@pytest.mark.parametrize("capturing", [False, True], ids=["eager", "graph"])
def test_a_stage_without_captures_hands_the_received_entry_on(glue, monkeypatch, capturing):
    """Eager: the entry ``recv`` delivered goes on as it is; while a graph is captured it
    is the runner's static buffer, so it is copied."""
    stacks = _stages(glue, [(0, 2), (2, 3), (3, 4)], [0, 3])
    first, middle = stacks[0], stacks[1]
    entry = glue.pp_aux_outgoing(first, [_capture(0)], None)["aux_hidden_states"]
    if capturing:
        _capturing_a_graph(monkeypatch)
    with CountCopies() as counted:
        sent = glue.pp_aux_outgoing(middle, [], {"aux_hidden_states": entry})
    assert (sent["aux_hidden_states"] is entry) is not capturing
    assert counted.counts == ({"aten::cat": 1} if capturing else {})
    assert torch.equal(sent["aux_hidden_states"], _capture(0))


def test_a_missing_or_narrow_entry_raises_naming_the_captures(glue):
    first, last = _stages(glue, [(0, 2), (2, 4)], [1, 3])
    with pytest.raises(
        RuntimeError,
        match=r"no 'aux_hidden_states' entry, so the aux "
        r"captures of layers \[1\] are missing",
    ):
        glue.pp_aux_collect(last, [_capture(3)], {"hidden_states": torch.zeros(1)})
    narrow = {"aux_hidden_states": torch.zeros(TOKENS, HIDDEN // 2)}
    with pytest.raises(
        RuntimeError,
        match=f"entry is {HIDDEN // 2} wide, but earlier "
        f"stages capture layers \\[1\\] \\({HIDDEN} wide\\)",
    ):
        glue.pp_aux_collect(last, [_capture(3)], narrow)
    # An entry where no earlier stage captures: the stages disagree on the capture ids.
    lonely = Stack(2, 4, config=_config(), ids=[3])
    glue.set_pp_aux_capture(lonely, _group(1, 2), hidden_size=HIDDEN)
    with pytest.raises(
        RuntimeError,
        match="entry is 8 wide, but earlier stages capture "
        r"layers \[\] \(0 wide\)",
    ):
        glue.pp_aux_collect(lonely, [_capture(3)], {"aux_hidden_states": _capture(1)})
    with pytest.raises(RuntimeError, match=r"took 0 aux hidden states but owns .*\[1\]"):
        glue.pp_aux_outgoing(first, [], None)


def test_relay_is_declared_per_method_and_not_past_a_subclass_with_its_own_stack(glue):
    class Patched(torch.nn.Module):
        pp_aux_relay_methods = ("EAGLE3",)

        def __init__(self):
            super().__init__()

        def set_eagle3_layers_to_capture(self, layer_ids=None):
            pass

        def set_dflash_layers_to_capture(self, layer_ids):
            pass

    class SameStack(Patched):
        """Keeps the base's ``__init__``, ``forward`` and hooks."""

    class OwnStack(Patched):
        def __init__(self):
            super().__init__()

    class OwnHook(Patched):
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            pass

    relays = glue.relays_pp_aux_capture
    assert relays(Patched, "EAGLE3") and relays(Patched, "eagle3")
    assert not relays(Patched, "DFLASH") and not relays(Patched, "DSPARK")
    assert relays(SameStack, "EAGLE3")
    assert not relays(OwnStack, "EAGLE3")
    assert not relays(OwnHook, "EAGLE3")
    assert not relays(torch.nn.Module, "EAGLE3")

    glue.check_pp_aux_capture(Patched(), "EAGLE3", 2)
    glue.check_pp_aux_capture(OwnStack(), "EAGLE3", 1)  # one stage loses nothing
    with pytest.raises(
        NotImplementedError, match=r"^OwnStack's decoder stack does not relay EAGLE3's .*pp_size=3"
    ):
        glue.check_pp_aux_capture(OwnStack(), "EAGLE3", 3)
    with pytest.raises(
        NotImplementedError, match=r"^Patched's decoder stack does not relay DFLASH's"
    ):
        glue.check_pp_aux_capture(Patched(), "DFLASH", 2)


def test_the_width_is_the_one_the_hook_passes(glue):
    stack = Stack(0, 2, config=_config())
    glue.set_pp_aux_capture(stack, _group(1, 2), hidden_size=5)
    assert stack.pp_aux_relay.hidden_size == 5
    # Nothing is guessed from the stack: a hook that passes no width is an error.
    with pytest.raises(TypeError, match="hidden_size"):
        glue.set_pp_aux_capture(stack, _group(1, 2))
    assert not hasattr(glue, "_hidden_size")


def test_pp1_and_ids_the_loop_never_reaches_leave_everything_as_it_is(glue):
    single = Stack(0, 4, config=_config())
    glue.set_pp_aux_capture(single, _group(0, 1), hidden_size=HIDDEN)
    aux = [_capture(1), _capture(3)]
    assert glue.pp_aux_collect(single, aux, None) is aux
    assert glue.pp_aux_outgoing(single, aux, None) == {}
    outside = Stack(2, 4, config=_config(), ids=[7, -1])
    glue.set_pp_aux_capture(outside, _group(1, 2), hidden_size=HIDDEN)
    assert outside.pp_aux_relay is None
    assert glue.pp_aux_proxy_hidden_size(outside) == 0


def test_the_width_is_looked_up_from_the_relay_anywhere_in_the_model(glue):
    # A VL model: the relayed stack is the language model's, two levels down.
    outer = torch.nn.Module()
    outer.language_model = torch.nn.Module()
    outer.language_model.model = Stack(2, 4, config=_config(), ids=[0, 1, 3])
    outer.vision = Stack(0, 4, config=_config())  # no relay: never given one
    glue.set_pp_aux_capture(outer.language_model.model, _group(1, 2), hidden_size=6)
    assert glue.pp_aux_proxy_hidden_size(outer) == 2 * 6
    assert glue.pp_aux_proxy_hidden_size(outer.vision) == 0
    # PP=1 sets the relay to None: nothing to size.
    glue.set_pp_aux_capture(outer.language_model.model, _group(0, 1), hidden_size=6)
    assert glue.pp_aux_proxy_hidden_size(outer) == 0


def test_two_relayed_stacks_in_one_model_raise(glue):
    outer = torch.nn.Module()
    outer.a, outer.b = Stack(2, 4, config=_config()), Stack(2, 4, config=_config())
    for stack in (outer.a, outer.b):
        glue.set_pp_aux_capture(stack, _group(1, 2), hidden_size=HIDDEN)
    with pytest.raises(RuntimeError, match="2 decoder stacks that relay"):
        glue.pp_aux_proxy_hidden_size(outer)
