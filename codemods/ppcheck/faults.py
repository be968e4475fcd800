"""Deliberately broken transports, to prove that the harness catches each kind of bug.

Each fault mimics a mistake a model port could make; a scenario run with one of them
must FAIL (``auxcap validate-pp`` never reports them as passing).
"""

from __future__ import annotations

from codemods.upstream.pp_aux_transport import AUX_KEY_PREFIX, PPAuxTransport, aux_key


class DropsPassThrough(PPAuxTransport):
    """Relay that forwards only its own captures, losing those of earlier stages."""

    def outgoing(self, captures, incoming):
        return {aux_key(i): captures[i] for i in sorted(self.plan.local_layer_ids)}

    def collect(self, captures, incoming, like):
        entries = {int(k[len(AUX_KEY_PREFIX) :]): v for k, v in (incoming or {}).items()
                   if k.startswith(AUX_KEY_PREFIX)}
        entries.update(captures)
        return [entries[i] for i in self.plan.layer_ids if i in entries]


class SortedOrder(PPAuxTransport):
    """Returns the captures sorted by layer id instead of in the requested order."""

    def collect(self, captures, incoming, like):
        result = super().collect(captures, incoming, like)
        order = sorted(range(len(result)), key=lambda k: self.plan.layer_ids[k])
        return [result[k] for k in order]


class StringKeyOrder(PPAuxTransport):
    """Relay that orders handoff keys as strings (``aux_hidden_states_10`` before ``_9``)."""

    def outgoing(self, captures, incoming):
        out = super().outgoing(captures, incoming)
        return {key: out[key] for key in sorted(out)}


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
    "string-key-order": StringKeyOrder,
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
