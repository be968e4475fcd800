"""Deliberately broken transports, to prove that the harness catches each kind of bug.

Each fault mimics a mistake a model port could make; a scenario run with one of them
must FAIL (``auxcap validate-pp`` never reports them as passing).
"""

from __future__ import annotations

import torch

from codemods.ppcheck.pp_aux_transport import AUX_ENTRY, PPAuxTransport


class DropsPassThrough(PPAuxTransport):
    """Relay that forwards only its own captures, losing those of earlier stages, and a
    last stage that quietly keeps whatever arrived."""

    def outgoing(self, captures, incoming):
        own = [captures[i] for i in sorted(self.plan.local_layer_ids)]
        return {AUX_ENTRY: torch.cat(own, dim=-1)} if own else {}

    def collect(self, captures, incoming, like):
        entry = (incoming or {}).get(AUX_ENTRY)
        earlier = [] if entry is None else list(entry.split(like.shape[-1], dim=-1))
        return earlier + [captures[i] for i in sorted(captures)]


class SortedOrder(PPAuxTransport):
    """Returns the captures sorted by layer id instead of in the requested order."""

    def collect(self, captures, incoming, like):
        result = super().collect(captures, incoming, like)
        order = sorted(range(len(result)), key=lambda k: self.plan.layer_ids[k])
        return [result[k] for k in order]


class StringIdOrder(PPAuxTransport):
    """Relay that packs the aux entry in string order of the layer ids (10 before 9)."""

    def outgoing(self, captures, incoming):
        out = super().outgoing(captures, incoming)
        ids = self.plan.handoff_ids_after(self.plan.pp_rank)
        if AUX_ENTRY not in out or len(ids) < 2:
            return out
        pieces = dict(zip(ids, out[AUX_ENTRY].chunk(len(ids), dim=-1), strict=True))
        packed = [pieces[i] for i in sorted(ids, key=str)]
        return {AUX_ENTRY: torch.cat(packed, dim=-1)}


class StaleCapture(PPAuxTransport):
    """Sends the first microbatch's captures again for every later microbatch."""

    _first = None

    def outgoing(self, captures, incoming):
        if self._first is None:
            self._first = dict(captures)
        stale = {
            i: (self._first[i] if self._first[i].shape == t.shape else t)
            for i, t in captures.items()
        }
        return super().outgoing(stale, incoming)


class SkipsDirectSend(PPAuxTransport):
    """Direct mode whose far stages never send: the last rank waits forever (a hang)."""

    def outgoing(self, captures, incoming):
        if self.plan.sends_direct(self.plan.pp_rank):
            return {}
        return super().outgoing(captures, incoming)


FAULTS = {
    "drop-pass-through": DropsPassThrough,
    "sorted-order": SortedOrder,
    "string-id-order": StringIdOrder,
    "stale-capture": StaleCapture,
    "skip-direct-send": SkipsDirectSend,
}


def transport_class(fault):
    """The transport class of ``fault`` (None: the real one)."""
    if fault is None:
        return PPAuxTransport
    try:
        return FAULTS[fault]
    except KeyError:
        raise ValueError(f"unknown fault {fault!r}; known: {sorted(FAULTS)}") from None
