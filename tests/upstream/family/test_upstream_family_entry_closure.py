"""The family rewriter on a synthetic decoder stack whose layers get a local function that
prepares the value and captures it (``fixtures/upstream/entry_closure/``, the glm5_next
shape), and whose non-last-rank branch returns early under a condition of its own.
Functions that could capture other than once per call are left alone, with a reason."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from codemods.upstream.family.plan import plan_family

INPUTS = Path(__file__).resolve().parents[3] / "fixtures" / "upstream" / "entry_closure"
NAME = "closure_stack.py"
FORWARD = "closure_stack.py:ClosureStack.forward: "


def _plan(tmp_path: Path, old: str | None = None, new: str = ""):
    source = (INPUTS / NAME).read_text()
    if old is not None:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    models = tmp_path / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / NAME).write_text(source)
    plan = plan_family(models)
    return plan.decisions[NAME], plan


def test_closure_stack_is_patched_and_every_handoff_return_carries_the_captures(tmp_path):
    decision, plan = _plan(tmp_path)
    assert decision.patched, decision.reason
    assert decision.capture_kinds == ("entry-callback",)
    assert not decision.final_capture
    text = plan.rewritten()[NAME]
    cst.parse_module(text)
    assert (
        "            if self.config.wide_stream:\n"
        "                return pp_aux_handoff(\n"
        "                    self,\n"
        '                    PPProxyTensors({"hidden_states": hidden_states}),\n'
        "                    aux_hidden_states,\n"
        "                    pp_proxy_tensors,\n"
        "                )\n"
        "            return pp_aux_handoff(\n"
        "                self,\n"
        "                residual_batch.to_pp(hidden_states, forward_batch),\n"
        "                aux_hidden_states,\n"
        "                pp_proxy_tensors,\n"
        "            )\n"
    ) in text
    assert (
        "        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)\n"
        "        if len(aux_hidden_states) == 0:\n"
    ) in text
    # The function and the layer call stay as they are.
    assert "                aux_hidden_states.capture(value, owned=owned)\n" in text
    assert "capture_output=capture_output\n" in text
    # Applied once: nothing more to do on the rewritten file.
    again = tmp_path / "again"
    again.mkdir()
    (again / NAME).write_text(text)
    assert plan_family(again).rewritten() == {}


def test_closure_that_may_skip_the_capture_is_left_alone(tmp_path):
    decision, _ = _plan(
        tmp_path,
        "                aux_hidden_states.capture(value, owned=owned)\n",
        "                if value.shape[0] != 0:\n"
        "                    aux_hidden_states.capture(value, owned=owned)\n",
    )
    assert not decision.patched
    assert decision.reason == FORWARD + (
        "`capture_output` calls `aux_hidden_states.capture` other than once, "
        "unconditionally, in its body"
    )


def test_closure_that_returns_is_left_alone(tmp_path):
    decision, _ = _plan(
        tmp_path,
        "                value = self._prepare(value)\n",
        "                if value is None:\n                    return\n",
    )
    assert not decision.patched
    assert decision.reason == FORWARD + "`capture_output` returns, yields or defines a function"


def test_layer_call_without_the_closure_is_left_alone(tmp_path):
    decision, _ = _plan(
        tmp_path,
        "                capture_output=capture_output\n",
        "                capture_output=self.other_callback\n",
    )
    assert not decision.patched
    assert decision.reason == FORWARD + (
        "no `capture_output=capture_output if i in self.layers_to_capture else None` in "
        "the layer call"
    )


def test_handoff_returning_in_an_else_is_left_alone(tmp_path):
    decision, _ = _plan(
        tmp_path,
        '                return PPProxyTensors({"hidden_states": hidden_states})\n',
        '                return PPProxyTensors({"hidden_states": hidden_states})\n'
        "            else:\n"
        "                if self.flip:\n"
        "                    return PPProxyTensors({})\n",
    )
    assert not decision.patched
    assert decision.reason == FORWARD + (
        "the non-last-rank branch returns other than at its end or at the end of a "
        "top-level `if` in it"
    )
