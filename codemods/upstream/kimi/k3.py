"""Rewrite SGLang's Kimi-K3 model file (0.5.18-0.5.20) so DSPARK aux capture works under
pipeline parallelism, with the relay of the Kimi-Linear rewrite (``kimi/linear.py``).

The file has the Kimi-Linear structure (a causal-LM class whose
``set_dspark_layers_to_capture`` raises ``NotImplementedError`` under PP and returns early
on non-last ranks; an inner model whose forward appends captures after requested layers and
returns ``PPProxyTensors`` on non-last ranks), with three differences this module handles:

* the non-last-rank branch runs statements before its ``return PPProxyTensors({...})``
  (under attention residuals it folds the delayed add into the stream head and hands the
  block bank on as ``residual``); they are kept, only the return changes;
* the capture goes through a method, ``self._dspark_capture_stream(i, hidden_states,
  residual, attn_res)``, which under attention residuals mixes the stream head with the
  bank using the *next* layer's scoring weights (the model's output-side weights for the
  last layer, which exist only on the last PP rank);
* layers return three values and the forward builds ``attn_res`` before the layer loop.

So a stage's last layer cannot be mixed where it runs.  After the rewrite, the capture
method returns the stream head for that layer on a non-last rank (the value the handoff
carries as ``hidden_states``), the relay hands it on like any capture, and the next stage,
which owns the next layer's weights and received the same bank, mixes it right after
building ``attn_res``, exactly as PP=1 computes it::

        if (
            self.pp_aux_relay is not None
            and attn_res is not None
            and self.start_layer - 1 in self.dspark_layers_to_capture
        ):
            dspark_incoming = dict(dspark_incoming)
            dspark_entry = dspark_incoming[AUX_ENTRY]
            dspark_width = dspark_incoming["hidden_states"].shape[-1]
            dspark_head = self._dspark_capture_stream(
                self.start_layer - 1, dspark_entry[:, -dspark_width:], None, attn_res
            )
            dspark_incoming[AUX_ENTRY] = torch.cat(
                [dspark_entry[:, :-dspark_width], dspark_head], dim=-1
            )

The head passes through the next stage, as every capture does in the PP handoff.  The
setter prepares the relay like every patched model (see ``kimi/linear.py``)::

        set_pp_aux_capture(
            self.model, self.pp_group, ids_attr="dspark_layers_to_capture"
        )

:func:`analyse` returns ``needs_patch``, ``patched`` or ``supported`` (0.5.21+, where the
file relays DSPARK captures itself) like :func:`codemods.upstream.kimi.linear.analyse`;
:func:`rewrite` returns the new text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit import names
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.kimi import syntax as kimi_syntax
from codemods.upstream.kimi.relay import relay_forward

MODULE = "sglang.srt.models.kimi_k3"
NAME = "kimi_k3"
RELAY_KEY = "dspark_hidden_states"
NEEDS_PATCH, PATCHED, SUPPORTED = kimi.NEEDS_PATCH, kimi.PATCHED, kimi.SUPPORTED


class UnrecognisedShape(kimi.UnrecognisedShape):
    """The file does not have the Kimi-K3 structure the rewriter knows how to change."""

    def __init__(self, path: str, missing: list[str]) -> None:
        super().__init__(path, missing)
        self.args = (f"{path}: unrecognised Kimi-K3 model file: {'; '.join(self.missing)}",)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class StreamShape:
    """The capture method and where the rewrite reaches into it."""

    method: cst.FunctionDef
    name: str  # "_dspark_capture_stream"
    layer_param: str
    hidden_param: str
    split: cst.If  # `if layer_idx + 1 < self.end_layer:` (next layer or output side)
    attn: str  # the forward's attention-residual variable, "attn_res"
    pp: str  # "self.pp_group"
    boundary_return: cst.SimpleStatementLine
    handoff_entries: list[tuple[str, str]]
    hidden: str


@dataclass
class Analysis(kimi.Analysis):
    stream: StreamShape | None = None


def _stream(forward: kimi.ForwardShape, missing: list[str]) -> StreamShape | None:
    where = f"{forward.cls.name.value}.forward"
    assert isinstance(forward.capture_if.body, cst.IndentedBlock)
    line = forward.capture_if.body.body[0]
    call = line.body[0].value.args[0].value  # type: ignore[attr-defined]
    if not (
        m.matches(call, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name())))
        and len(call.args) == 4
        and m.matches(call.args[0].value, m.Name(forward.loop_var))
        and m.matches(call.args[3].value, m.Name())
    ):
        missing.append(
            f"{where}: captures appended as `self.<method>({forward.loop_var}, "
            f"hidden_states, residual, attn_res)`"
        )
        return None
    name = call.func.attr.value
    attn = call.args[3].value.value
    method = kimi_syntax.methods_of(forward.cls).get(name)
    params = [p.name.value for p in method.params.params] if method else []
    if method is None or len(params) != 5:
        missing.append(
            f"{forward.cls.name.value}.{name}(self, layer_idx, hidden_states, residual, attn_res)"
        )
        return None
    split = next(
        (
            s
            for s in kimi_syntax.statements_of(method)
            if isinstance(s, cst.If)
            and kimi_syntax.mentions_attr(s.test, "end_layer")
            and s.orelse is not None
        ),
        None,
    )
    if split is None:
        missing.append(
            f"{forward.cls.name.value}.{name}: `if {params[1]} + 1 < "
            f"self.end_layer: ... else: ...` choosing the mixing weights"
        )
        return None
    if forward.boundary is None:
        missing.append(f"{where}: `if not <pp>.is_last_rank:` after the layer loop")
        return None
    handoff = kimi.handoff_return(forward.boundary)
    if handoff is None:
        missing.append(
            f"{where}: the non-last-rank branch ending in `return PPProxyTensors({{...}})`"
        )
        return None
    boundary_return, entries = handoff
    hidden = kimi.hidden_entry(entries)
    if hidden is None:
        missing.append(f'{where}: a "hidden_states" entry in the stage handoff')
        return None
    pp = kimi_syntax.code(forward.boundary.test.expression.value)  # type: ignore[attr-defined]
    return StreamShape(
        method, name, params[1], params[2], split, attn, pp, boundary_return, entries, hidden
    )


def _relays_itself(module: cst.Module, source: str, path: str) -> Analysis | None:
    """SGLang's own DSPARK relay (0.5.21+): the ``dspark_hidden_states`` handoff entry and
    no PP=1 guard left in the setter, whatever the forward looks like."""
    setter = kimi._find_setter(module, [])
    if setter is None or setter.pp_guards or RELAY_KEY not in source:
        return None
    return Analysis(
        path,
        SUPPORTED,
        module,
        setter,
        None,
        [
            f"{path} already carries {NATIVE.name} captures across PP stages (setter has "
            f"no PP=1 guard; the stage handoff carries {RELAY_KEY!r})"
        ],
    )


def analyse(source: str, path: str = MODULE) -> Analysis:
    """Classify ``source``; raises :class:`UnrecognisedShape` naming what is missing.

    The setter and forward are found by ``kimi/linear.py``'s discovery; what differs from
    Kimi-Linear (the handoff branch, the capture method) is judged here.
    """
    module, setter, forward, missing = kimi.discover(source, path, UnrecognisedShape)
    if setter is None or forward is None:
        relayed = _relays_itself(module, source, path)
        if relayed is not None:
            return relayed
        raise UnrecognisedShape(path, missing)
    known = kimi.already_relayed((module, setter, forward), source, path, Analysis)
    if known is not None:
        return known
    missing += kimi.setter_problems(setter)
    stream = _stream(forward, missing)
    if missing or stream is None:
        raise UnrecognisedShape(path, missing)
    notes = kimi.setter_notes(setter)
    notes.append(
        f"{forward.cls.name.value}: a stage's last captured layer is mixed on the "
        f"next stage (it holds the next layer's weights)"
    )
    return Analysis(path, NEEDS_PATCH, module, setter, forward, notes, stream=stream)


# ----------------------------------------------------------------------------- rewrite

_D2, _D3 = "    " * 2, "    " * 3


def _rewrite_stream(func: cst.FunctionDef, stream: StreamShape) -> cst.FunctionDef:
    layer, hidden = stream.layer_param, stream.hidden_param
    lines = [
        f"{_D2}if {layer} + 1 == self.end_layer and not {stream.pp}.is_last_rank:",
        f"{_D3}# The next stage holds the weights that mix this stream: hand on the",
        f"{_D3}# head (the value the PP handoff carries); that stage finishes it.",
        f"{_D3}return {hidden}",
    ]
    (early,) = parse_statements(lines_to_text(lines), _D2)
    body: list[cst.BaseStatement] = []
    for stmt in kimi_syntax.statements_of(func):
        if stmt.deep_equals(stream.split):
            body.append(early)
        body.append(stmt)
    assert isinstance(func.body, cst.IndentedBlock)
    return func.with_changes(body=func.body.with_changes(body=body))


def _mix_incoming_head(stream: StreamShape) -> Callable[[set[str], str], list[str]]:
    """The lines, after the relay's init, that mix the stream head the previous stage sent
    with this stage's first layer's weights (given the forward's taken names and the
    incoming handoff's name)."""

    def lines(taken: set[str], incoming: str) -> list[str]:
        head = kimi_syntax.fresh("dspark_head", taken)
        entry = kimi_syntax.fresh("dspark_entry", taken)
        width = kimi_syntax.fresh("dspark_width", taken)
        return [
            f"{_D2}if (",
            f"{_D3}self.{names.RELAY_ATTR} is not None",
            f"{_D3}and {stream.attn} is not None",
            f"{_D3}and self.start_layer - 1 in self.{kimi.CAPTURE_ATTR}",
            f"{_D2}):",
            f"{_D3}# The previous stage sent the stream head after its last layer (the last",
            f"{_D3}# capture of the aux entry); mix it with this stage's first layer's",
            f"{_D3}# weights and bank, as PP=1 does.",
            f"{_D3}{incoming} = dict({incoming})",
            f"{_D3}{entry} = {incoming}[AUX_ENTRY]",
            f'{_D3}{width} = {incoming}["hidden_states"].shape[-1]',
            *render_call(
                _D3,
                f"{head} = ",
                Call(
                    f"self.{stream.name}",
                    ("self.start_layer - 1", f"{entry}[:, -{width}:]", "None", stream.attn),
                ),
            ),
            *render_call(
                _D3,
                f"{incoming}[AUX_ENTRY] = ",
                Call("torch.cat", (f"[{entry}[:, :-{width}], {head}]", "dim=-1")),
            ),
        ]

    return lines


def rewrite(source: str, path: str = MODULE) -> tuple[str, Analysis]:
    """The patched text of a Kimi-K3 model file (``source`` itself when nothing to do)."""
    analysis = analyse(source, path)
    if analysis.status != NEEDS_PATCH:
        return source, analysis
    forward, stream = analysis.forward, analysis.stream
    assert forward is not None and stream is not None

    def rewrite_forward(func: cst.FunctionDef) -> cst.FunctionDef:
        return relay_forward(
            func,
            forward,
            stream.handoff_entries,
            stream.hidden,
            stream.boundary_return,
            _mix_incoming_head(stream),
        )

    more = [(stream.method, lambda func: _rewrite_stream(func, stream))]
    return kimi.rewrite_text(analysis, path, rewrite_forward, more, ("AUX_ENTRY",)), analysis
