"""SGLang's own DSPARK relay (0.5.21+) through the shared helpers, in the model files that
carry it (``graph_sizing.RELAY_MODULES``: Kimi-Linear and Kimi-K3).

This belongs to the sizing part, which renames that relay's entry and sizing path for every
capture method: the same files, in the same step.  From 0.5.21 ``kimi_linear.py`` and ``kimi_k3.py`` carry DSPARK captures across pipeline
stages themselves: each non-first stage appends the incoming concatenated entry to its
capture list, each non-last stage ``torch.cat``\\ s the list into the handoff, and a width
method counts the layers before the stage by hand.  Once every other model relays through
the shipped helpers, that is a second mechanism; this module replaces it with the first
(after :mod:`~codemods.upstream.sizing.graph_sizing` renamed the entry to
``aux_hidden_states``).  Before (Kimi-Linear, 0.5.22+)::

    aux_hidden_states = []
    if (
        self.dspark_layers_to_capture is not None
        and not self.pp_group.is_first_rank
        and "aux_hidden_states" in pp_proxy_tensors.tensors
    ):
        aux_hidden_states.append(pp_proxy_tensors["aux_hidden_states"])
    ...
    if not self.pp_group.is_last_rank:
        proxy = residual_batch.to_pp(hidden_states, forward_batch)
        if aux_hidden_states:
            proxy.tensors["aux_hidden_states"] = torch.cat(aux_hidden_states, dim=-1)
        return proxy
    ...
    if self.dspark_layers_to_capture is not None:
        return hidden_states, aux_hidden_states

after::

    aux_hidden_states = []
    ...
    if not self.pp_group.is_last_rank:
        proxy = residual_batch.to_pp(hidden_states, forward_batch)
        proxy = pp_aux_handoff(self, proxy, aux_hidden_states, pp_proxy_tensors)
        return proxy
    ...
    if self.dspark_layers_to_capture is not None:
        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)
        return hidden_states, aux_hidden_states

(0.5.21 builds a dict: ``proxy_tensors.update(pp_aux_outgoing(...))``).  The DSPARK hook
gives the stack its relay, with the width it knows (``set_pp_aux_capture(self.model,
self.pp_group, ids_attr=..., hidden_size=self.config.hidden_size)``), and the width
methods go (the hand-written one and Kimi-K3's VL wrapper, which asks its language
model's): the CUDA-graph sizing asks the shipped lookup, which finds the relay in any
model (``pp_aux_proxy_hidden_size(model)``).  Kimi-K3 takes capture id ``i`` on the
stage that runs layer ``i + 1`` (the last one at the final norm), so its stack names those
layers (``pp_aux_capture_entries``, as the family's gated shape does) and the last stage
collects with ``final=True``.  A file without one of these pieces raises
:class:`NativeRelayShape` naming it.
"""

from __future__ import annotations

import re

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import COLLECT, ENTRY_IDS_ATTR, GLUE_MODULE, HANDOFF, OUTGOING
from codemods.upstream.edit.parsing import parse_text
from codemods.upstream.edit.pyformat import Call, lines_to_text, render_call

ATTACH = "set_pp_aux_capture"
IDS = "dspark_layers_to_capture"
ENTRY = '"aux_hidden_states"'


class NativeRelayShape(ValueError):
    """A Kimi file's own DSPARK relay lacks a piece this module replaces."""


#: The incoming entry appended to the capture list (Kimi-Linear: its own ``if``; Kimi-K3:
#: two lines inside the non-first-stage branch).
_INCOMING_IF = re.compile(
    r"^(?P<i> *)if \(\n(?:(?P=i)    .*\n)*?(?P=i)    and "
    + re.escape(ENTRY)
    + r" in pp_proxy_tensors\.tensors\n(?P=i)\):\n(?P=i)    aux_hidden_states\.append\("
    r"pp_proxy_tensors\[" + re.escape(ENTRY) + r"\]\)\n",
    re.M,
)
_INCOMING_LINES = re.compile(
    r"^(?P<i> *)if " + re.escape(ENTRY) + r" in pp_proxy_tensors\.tensors:\n"
    r"(?P=i)    aux_hidden_states\.append\(pp_proxy_tensors\[" + re.escape(ENTRY) + r"\]\)\n",
    re.M,
)
#: The non-last stage's ``torch.cat`` into the handoff (``x.tensors[...]`` or a dict).
_OUTGOING = re.compile(
    r"^(?P<i> *)if aux_hidden_states:\n(?P=i)    (?P<name>\w+)(?P<tensors>\.tensors)?\["
    + re.escape(ENTRY)
    + r"\] = torch\.cat\(\n(?P=i)        aux_hidden_states, dim=-1\n(?P=i)    \)\n",
    re.M,
)
#: The last stage's return of its captures.
_RETURN = re.compile(
    r"^(?P<i> *)if self\.dspark_layers_to_capture is not None:\n"
    r"(?P<j> *)return hidden_states, aux_hidden_states\n",
    re.M,
)
#: The hand-written width method, and the blank line after it.
_WIDTH = re.compile(
    r"^(?P<i> *)def get_pp_proxy_aux_hidden_size\(self\) -> int:\n"
    r"(?P=i)    layers = self\.model\.dspark_layers_to_capture or \[\]\n"
    r"(?P=i)    return self\.config\.hidden_size \* sum\(\n"
    r"(?P=i)        layer < self\.model\.start_layer(?: - 1)? for layer in layers\n"
    r"(?P=i)    \)\n\n?",
    re.M,
)
#: Kimi-K3's VL wrapper asking its language model's width method, and the blank line after.
_WRAPPER_WIDTH = re.compile(
    r"^(?P<i> *)def get_pp_proxy_aux_hidden_size\(self\) -> int:\n"
    r"(?P=i)    if self\.language_model is None:\n"
    r"(?P=i)        return 0\n"
    r"(?P=i)    return self\.language_model\.get_pp_proxy_aux_hidden_size\(\)\n\n?",
    re.M,
)
WIDTH_METHOD = "get_pp_proxy_aux_hidden_size"
#: The DSPARK hook's store of the ids on the stack.
_STORE = re.compile(r"^(?P<i> *)self\.model\.dspark_layers_to_capture = list\(layer_ids\)\n", re.M)
#: Where Kimi-K3's stack gets its entry property: before its capture method.
_PACKS = re.compile(r"^(?P<i> *)def _dspark_capture_stream\(", re.M)


def _one(pattern: re.Pattern[str], text: str, what: str, path: str) -> re.Match[str]:
    found = list(pattern.finditer(text))
    if len(found) != 1:
        raise NativeRelayShape(f"{path}: {what} not found once ({len(found)} found)")
    return found[0]


def _splice(text: str, match: re.Match[str], new: str) -> str:
    return text[: match.start()] + new + text[match.end() :]


def _call(indent: str, prefix: str, name: str, args: tuple[str, ...], suffix: str = "") -> str:
    return lines_to_text(render_call(indent, prefix, Call(name, args), suffix))


def relay_through_helpers(text: str, path: str, entries: bool) -> str:
    """``text`` (renamed ``kimi_linear.py`` or ``kimi_k3.py``) relaying through the shipped
    helpers; ``entries``: capture id ``i`` is taken on the stage of layer ``i + 1``
    (Kimi-K3).  The text itself when it already calls them."""
    if f"{ATTACH}(" in text:
        return text
    incoming = _INCOMING_LINES if entries else _INCOMING_IF
    text = _splice(text, _one(incoming, text, "the incoming aux entry", path), "")
    match = _one(_OUTGOING, text, "the outgoing aux entry", path)
    pad, name = match["i"], match["name"]
    if match["tensors"]:
        new = _call(
            pad, f"{name} = ", HANDOFF, ("self", name, "aux_hidden_states", "pp_proxy_tensors")
        )
    else:
        outgoing = ("self", "aux_hidden_states", "pp_proxy_tensors")
        new = _call(pad, f"{name}.update(", OUTGOING, outgoing, suffix=")")
    text = _splice(text, match, new)
    match = _one(_RETURN, text, "the last stage's return of its captures", path)
    collected: tuple[str, ...] = ("self", "aux_hidden_states", "pp_proxy_tensors")
    collected += ("final=True",) if entries else ()
    collect = _call(match["j"], "aux_hidden_states = ", COLLECT, collected)
    text = _splice(
        text,
        match,
        match.group(0).replace(match["j"] + "return", collect + match["j"] + "return", 1),
    )
    text = _splice(text, _one(_WIDTH, text, f"the {NATIVE.name} width method", path), "")
    if entries:
        text = _splice(text, _one(_WRAPPER_WIDTH, text, "the VL wrapper's width", path), "")
    if WIDTH_METHOD in text:
        raise NativeRelayShape(f"{path}: {WIDTH_METHOD} is still asked after it went")
    ids_attr = ENTRY_IDS_ATTR if entries else IDS
    match = _one(_STORE, text, f"the {NATIVE.name} hook's store of the ids", path)
    attach = _call(
        match["i"],
        "",
        ATTACH,
        (
            "self.model",
            "self.pp_group",
            f'ids_attr="{ids_attr}"',
            "hidden_size=self.config.hidden_size",
        ),
    )
    text = _splice(text, match, match.group(0) + attach)
    names = [ATTACH, COLLECT, HANDOFF if "pp_aux_handoff(" in text else OUTGOING]
    if entries:
        match = _one(_PACKS, text, "Kimi-K3's _dspark_capture_stream", path)
        pad = match["i"]
        prop = (
            f"{pad}@property\n"
            f"{pad}def {ENTRY_IDS_ATTR}(self):\n"
            f'{pad}    """Layers on whose stage each capture id is taken: id ``i`` on the\n'
            f"{pad}    stage that runs layer ``i + 1`` (the last layer's at the final "
            'norm)."""\n'
            f"{pad}    return [i + 1 for i in self.{IDS} or ()]\n\n"
        )
        text = text[: match.start()] + prop + text[match.start() :]
    return add_from_import(parse_text(text), GLUE_MODULE, sorted(names)).code
