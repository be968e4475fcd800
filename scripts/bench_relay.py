"""Benchmark the PP aux relay's copies: bytes copied and time per forward, before and after.

One process on CPU: the stages of a 32-layer model split evenly over 2, 3 and 4 stages
run one after the other, each handing the next the ``aux_hidden_states`` entry it builds
(what ``recv`` would deliver), with 4 capture ids (2, 10, 18, 29).  Only the relay's work
is timed: a list-collecting stack (its captures are tensors of its own) and a packing
stack (``AuxHiddenStatePacker``: the layers copy each capture into a slot).

* before: a non-last stage concatenates what it received with its own captures
  (``torch.cat``), a packing one from a packer sized for every capture id; the last
  stage clones each received capture out of the entry.
* after: the shipped helpers (``codemods/upstream/shipped/pp_aux_capture.py``): a
  packing non-last stage packs what it received and its own into a packer sized for
  them and sends its buffer; a list is concatenated once; the last stage returns views
  of the entry in an eager forward (no CUDA graph captured).

Bytes are counted at the ATen level (``copy_``, ``cat``, ``clone``, ``_to_copy``: bytes
written); before and after are interleaved round by round.

    python scripts/bench_relay.py [--tokens 2048] [--hidden 4096] [--rounds 20]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
NUM_LAYERS = 32
IDS = (2, 10, 18, 29)
STAGES = (2, 3, 4)


def _load_glue():
    path = ROOT / "codemods/upstream/shipped/pp_aux_capture.py"
    spec = importlib.util.spec_from_file_location("pp_aux_capture_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Packer:
    """SGLang 0.5.23's ``AuxHiddenStatePacker`` as far as the relay uses it (its buffer is
    allocated at the first capture), with the ``captured()`` the patch adds."""

    def __init__(self, num_captures):
        self.num_captures, self.buffer, self.width, self.taken = num_captures, None, None, 0

    def append(self, hidden):
        if self.buffer is None:
            self.width = hidden.shape[-1]
            shape = (*hidden.shape[:-1], self.width * self.num_captures)
            self.buffer = hidden.new_empty(shape)
        start = self.taken * self.width
        self.buffer[..., start : start + self.width].copy_(hidden)
        self.taken += 1

    def __len__(self):
        return self.taken

    def captured(self):
        return self.buffer[..., : self.taken * self.width]

    def finalize(self):
        assert self.taken == self.num_captures
        return self.buffer


class CountBytes(TorchDispatchMode):
    """Bytes written by the ATen calls that copy tensor data."""

    COPIES = ("aten::copy_", "aten::clone", "aten::cat", "aten::_to_copy")

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name in self.COPIES:
            self.bytes += out.numel() * out.element_size()
        return out


def _stacks(glue, size, hidden):
    bounds = [(NUM_LAYERS * r // size, NUM_LAYERS * (r + 1) // size) for r in range(size)]
    stacks = []
    for rank, (start, end) in enumerate(bounds):
        stack = torch.nn.Module()
        stack.config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
        stack.start_layer, stack.end_layer = start, end
        stack.layers_to_capture = list(IDS)
        group = SimpleNamespace(world_size=size, is_last_rank=rank == size - 1)
        glue.set_pp_aux_capture(stack, group, hidden_size=hidden)
        stacks.append(stack)
    return stacks


# The relay before: every non-last stage concatenates, the last clones what it received.
def _before_list(glue, stacks, own):
    entry = None
    for stack in stacks[:-1]:
        local = own[stack]
        tensors = ([] if entry is None else [entry]) + local
        entry = torch.cat(tensors, dim=-1) if tensors else None
    last = stacks[-1]
    received = [] if entry is None else list(entry.split(last.pp_aux_relay.hidden_size, -1))
    return [t.clone() for t in received] + own[last]


def _before_packer(glue, stacks, own):
    entry = None
    for stack in stacks[:-1]:
        packer = Packer(len(IDS))  # sized for every capture id
        for capture in own[stack]:
            packer.append(capture)
        local = list(packer.captured().split(stack.pp_aux_relay.hidden_size, -1))
        local = local if len(packer) else []
        tensors = ([] if entry is None else [entry]) + local
        entry = torch.cat(tensors, dim=-1) if tensors else None
    return _last_packer(glue, stacks[-1], own, entry)


def _last_packer(glue, last, own, entry):
    packer = Packer(len(IDS))
    incoming = None if entry is None else {"aux_hidden_states": entry}
    packer = glue.pp_aux_seed(last, packer, incoming)
    for capture in own[last]:
        packer.append(capture)
    return glue.pp_aux_collect(last, packer, incoming).finalize()


# The relay after: the shipped helpers, as the rewritten forwards call them.
def _after_list(glue, stacks, own):
    incoming = None
    for stack in stacks[:-1]:
        entry = glue.pp_aux_outgoing(stack, list(own[stack]), incoming)
        incoming = {"hidden_states": None, **entry}
    return glue.pp_aux_collect(stacks[-1], list(own[stacks[-1]]), incoming)


def _after_packer(glue, stacks, own):
    incoming = None
    for stack in stacks[:-1]:
        packer = glue.pp_aux_seed(stack, Packer(len(IDS)), incoming)
        for capture in own[stack]:
            packer.append(capture)
        entry = glue.pp_aux_outgoing(stack, packer, incoming)
        incoming = {"hidden_states": None, **entry}
    entry = None if incoming is None else incoming.get("aux_hidden_states")
    return _last_packer(glue, stacks[-1], own, entry)


def _measure(run, glue, stacks, own):
    with CountBytes() as counted:
        result = run(glue, stacks, own)
    start = time.perf_counter()
    run(glue, stacks, own)
    return counted.bytes, time.perf_counter() - start, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    glue = _load_glue()
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(1)
    captures = {i: torch.full((args.tokens, args.hidden), float(i), dtype=dtype) for i in IDS}
    reference = [captures[i] for i in IDS]
    print(
        f"{args.tokens} tokens x {args.hidden} hidden, {args.dtype}, capture ids {list(IDS)} "
        f"of {NUM_LAYERS} layers; {args.rounds} rounds, median time per forward"
    )
    print("| stages | stack | MB copied before | after | ratio | ms before | after | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for size in STAGES:
        stacks = _stacks(glue, size, args.hidden)
        own = {
            stack: [captures[i] for i in IDS if stack.start_layer <= i < stack.end_layer]
            for stack in stacks
        }
        for kind, before, after in (
            ("list", _before_list, _after_list),
            ("packer", _before_packer, _after_packer),
        ):
            samples = {before: [], after: []}
            copied = {}
            for _round in range(args.rounds + 1):  # round 0 warms up
                for run in (before, after):
                    nbytes, seconds, result = _measure(run, glue, stacks, own)
                    if kind == "list":
                        assert all(
                            torch.equal(a, b) for a, b in zip(result, reference, strict=True)
                        )
                    else:
                        assert torch.equal(result, torch.cat(reference, dim=-1))
                    copied[run] = nbytes
                    if _round:
                        samples[run].append(seconds)
            mb = {run: copied[run] / 2**20 for run in (before, after)}
            ms = {run: 1e3 * statistics.median(samples[run]) for run in (before, after)}
            ratio_mb = mb[after] / mb[before] if mb[before] else float("nan")
            print(
                f"| {size} | {kind} | {mb[before]:.0f} | {mb[after]:.0f} | {ratio_mb:.2f} "
                f"| {ms[before]:.1f} | {ms[after]:.1f} | {ms[after] / ms[before]:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
