"""Layer-entry callbacks wrapped in a local function (glm5_next, SGLang 0.5.21+).

Some decoder stacks do not hand ``aux_hidden_states.capture`` to the layer directly but a
function defined in the loop that prepares the value first (contracts hyper-connection
streams, gathers the rows of an attention-TP group) and then captures it::

        aux_hidden_states = AuxHiddenStateList()
        for i in range(normal_start_layer, normal_end_layer):
            ...
            with ctx:

                def capture_output(aux_hidden_state, *, owned=False):
                    aux_hidden_state = self._prepare_aux_hidden_state(aux_hidden_state)
                    ...
                    aux_hidden_states.capture(aux_hidden_state, owned=owned)

                (hidden_states, topk_indices) = layer(
                    ...,
                    capture_output=capture_output
                    if i in self.layers_to_capture
                    else None,
                )

Each call of the function captures exactly once, so layer ``i`` captures its (prepared)
input when ``i`` is a capture id: the capture points of the plain callback, and the forward
is rewritten the same way (:mod:`~codemods.upstream.family.shapes.entry`).
:func:`capture_closure` names such a function, or says why a loop's local function is not
one (it may capture conditionally, e.g. only non-empty batches, which would leave a stage
with fewer captures than capture layers).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from codemods.upstream.edit.walk import findall


def _capture_call(aux_name: str) -> m.Call:
    return m.Call(func=m.Attribute(value=m.Name(aux_name), attr=m.Name("capture")))


def capture_closure(loop: cst.For, aux_name: str) -> tuple[str | None, str | None]:
    """``(name, None)`` for the one function defined in ``loop`` that calls
    ``aux_name.capture(...)``, once, as a top-level statement of its body, with no
    ``return`` or ``yield`` and never rebound; ``(None, None)`` when the loop defines no
    function that captures; ``(None, problem)`` otherwise."""
    capture = _capture_call(aux_name)
    defs = [fn for fn in findall(loop, m.FunctionDef()) if findall(fn, capture)]
    if not defs:
        return None, None
    if len(defs) > 1:
        return None, f"the layer loop defines {len(defs)} functions that call `{aux_name}.capture`"
    fn = defs[0]
    name = fn.name.value
    if not isinstance(fn.body, cst.IndentedBlock):
        return None, f"`{name}` has no block body"
    top = [
        s for s in fn.body.body if m.matches(s, m.SimpleStatementLine(body=[m.Expr(value=capture)]))
    ]
    if len(findall(fn, capture)) != 1 or len(top) != 1:
        return None, (
            f"`{name}` calls `{aux_name}.capture` other than once, unconditionally, in its body"
        )
    if findall(fn, m.Return() | m.Yield() | m.FunctionDef(name=m.DoesNotMatch(m.Name(name)))):
        return None, f"`{name}` returns, yields or defines a function"
    rebinds = m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name))
    if findall(loop, rebinds):
        return None, f"`{name}` is rebound in the layer loop"
    return name, None
