"""The family rewriter on synthetic model files of the other 0.5.21+ layer-entry shapes
(``fixtures/upstream/entry_more/``): a stack that snapshots the residual stream at layer
entry into a plain list (nemotron_h), one that enumerates its slice of the layers and
picks the callback once per layer (qwen3_vl), and hooks that store the ids on every
rank of a split stack whose handoff is built from ``to_pp(...).tensors`` (gemma4,
qwen2_5_vl).  Variants that break the capture agreement are left alone, with a reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from codemods.upstream.family import registry
from codemods.upstream.family.plan import plan_family
from codemods.upstream.output.family_report import markdown_table

INPUTS = Path(__file__).resolve().parents[3] / "fixtures" / "upstream" / "entry_more"
NAMES = ["enumerated_stack.py", "snapshot_stack.py", "split_stack.py"]
NO_EARLY = "no hook returns early on non-last PP ranks"

#: The call a rewritten hook ends with.
HOOK_CALL = (
    "set_pp_aux_capture(\n"
    "            self.model, self.pp_group, hidden_size=self.config.hidden_size\n"
    "        )"
)


def _plan(tmp_path: Path, name: str, text: str | None = None):
    models = tmp_path / "models"
    models.mkdir(parents=True, exist_ok=True)
    source = (INPUTS / name).read_text()
    (models / name).write_text(source if text is None else text)
    return plan_family(models)


def _variant(tmp_path: Path, name: str, old: str, new: str):
    source = (INPUTS / name).read_text()
    assert source.count(old) == 1, old
    plan = _plan(tmp_path, name, source.replace(old, new))
    return plan.decisions[name], plan


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    models = tmp_path_factory.mktemp("entry_more")
    for name in NAMES:
        shutil.copy(INPUTS / name, models / name)
    return plan_family(models)


def test_every_fixture_is_patched_with_its_shape(plan):
    assert sorted(path.name for path in INPUTS.glob("*.py")) == NAMES
    decisions = plan.decisions
    for name in NAMES:
        assert decisions[name].patched, decisions[name].reason
    assert decisions["snapshot_stack.py"].capture_kinds == ("entry-snapshot",)
    assert decisions["snapshot_stack.py"].final_capture
    assert decisions["enumerated_stack.py"].capture_kinds == ("entry-callback",)
    assert not decisions["enumerated_stack.py"].final_capture
    assert decisions["split_stack.py"].capture_kinds == ("entry-callback",)
    assert decisions["split_stack.py"].final_capture
    assert decisions["split_stack.py"].early_return == ()
    assert registry.describe("entry-snapshot") in markdown_table(plan)


def test_snapshot_stack_hands_on_and_gathers_after_the_output_snapshot(plan):
    text = plan.rewritten()["snapshot_stack.py"]
    cst.parse_module(text)
    assert (
        "            return pp_aux_handoff(\n"
        "                self,\n"
        "                residual_batch.to_pp(hidden_states, forward_batch),\n"
        "                aux_hidden_states,\n"
        "                pp_proxy_tensors,\n"
        "            )\n"
    ) in text
    collect = (
        "        aux_hidden_states = pp_aux_collect(\n"
        "            self, aux_hidden_states, pp_proxy_tensors, final=True\n"
        "        )\n"
        "        if aux_hidden_states:\n"
    )
    assert collect in text
    assert text.index("residual_batch.snapshot(") < text.index(collect)
    assert HOOK_CALL in text
    assert "            return\n" not in text


def test_enumerated_stack_is_rewritten_like_the_range_loop(plan):
    text = plan.rewritten()["enumerated_stack.py"]
    cst.parse_module(text)
    assert "return pp_aux_handoff(" in text
    assert (
        "        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)\n"
        "        if len(aux_hidden_states) == 0:\n"
    ) in text


def test_split_stack_hooks_attach_without_an_early_return(plan):
    text = plan.rewritten()["split_stack.py"]
    cst.parse_module(text)
    assert text.count(HOOK_CALL) == 2
    assert (
        "            return pp_aux_handoff(\n"
        "                self, PPProxyTensors(proxy), aux_hidden_states, pp_proxy_tensors\n"
        "            )\n"
    ) in text
    # The output capture tested against the layer count stays last on the last stage.
    assert "pp_proxy_tensors, final=True\n" in text
    assert text.index("aux_hidden_states.append(hidden_states)") < text.index(
        "aux_hidden_states = pp_aux_collect("
    )


def test_snapshot_taken_after_the_layer_is_not_patched(tmp_path):
    # The capture block after the layer call would capture the layer's output.
    decision, plan = _variant(
        tmp_path,
        "snapshot_stack.py",
        "            hidden_states = self.layers[i].forward(\n"
        "                hidden_states=hidden_states, forward_batch=forward_batch\n"
        "            )\n",
        "",
    )
    assert not decision.patched
    assert "the layer loop does not assign `hidden_states`" in decision.reason
    decision, _ = _variant(
        tmp_path / "b",
        "snapshot_stack.py",
        "            if i in self.layers_to_capture:\n",
        "            hidden_states = self.layers[i](hidden_states)\n"
        "            if i in self.layers_to_capture:\n",
    )
    assert not decision.patched
    assert "does not start with `if i in self.layers_to_capture:`" in decision.reason
    assert plan.rewritten() == {}


def test_snapshot_list_filled_elsewhere_is_not_patched(tmp_path):
    decision, _ = _variant(
        tmp_path,
        "snapshot_stack.py",
        "        if not self.pp_group.is_last_rank:\n            return residual_batch",
        "        aux_hidden_states.append(hidden_states)\n"
        "        if not self.pp_group.is_last_rank:\n            return residual_batch",
    )
    assert not decision.patched
    assert "used between the layer loop and the PP handoff" in decision.reason


def test_enumerated_callback_handed_twice_in_one_iteration_is_not_patched(tmp_path):
    decision, _ = _variant(
        tmp_path,
        "enumerated_stack.py",
        "            else:\n                hidden_states = layer(\n",
        "            if True:\n                hidden_states = layer(\n",
    )
    assert not decision.patched
    assert "more than one layer call that can run in the same iteration" in decision.reason


def test_enumerated_loop_without_the_offset_is_not_patched(tmp_path):
    decision, _ = _variant(
        tmp_path,
        "enumerated_stack.py",
        "            layer_idx = layer_idx + self.start_layer\n",
        "",
    )
    assert not decision.patched
    assert "layer_idx = layer_idx + self.start_layer" in decision.reason


def test_split_stack_hooks_of_a_model_without_pp_keep_their_report(tmp_path):
    # A causal-LM forward that takes no pp_proxy_tensors does not run under PP.
    decision, plan = _variant(
        tmp_path,
        "split_stack.py",
        "    def forward(self, input_ids, positions, forward_batch, pp_proxy_tensors=None):\n"
        "        hidden_states = self.model(input_ids, positions, forward_batch, "
        "pp_proxy_tensors)\n",
        "    def forward(self, input_ids, positions, forward_batch):\n"
        "        hidden_states = self.model(input_ids, positions, forward_batch)\n",
    )
    assert not decision.patched and decision.reason == NO_EARLY
    assert plan.rewritten() == {}
    # A hook that returns part-way is not appended to.
    decision, plan = _variant(
        tmp_path / "b",
        "split_stack.py",
        '            raise ValueError("DFLASH requires explicit layer_ids.")\n',
        "            return\n",
    )
    assert not decision.patched and decision.reason == NO_EARLY
    assert plan.rewritten() == {}


def test_output_capture_against_a_reassigned_count_is_not_patched(tmp_path):
    decision, _ = _variant(
        tmp_path,
        "split_stack.py",
        "        if num_layers in self.layers_to_capture:\n",
        "        num_layers = num_layers - 1\n        if num_layers in self.layers_to_capture:\n",
    )
    assert not decision.patched
    assert decision.reason == NO_EARLY


def test_stack_setter_is_added_only_where_the_hook_would_fail(tmp_path):
    store = "        self.model.layers_to_capture = [val + 1 for val in layer_ids]\n"
    guarded = (
        "        ids = [val + 1 for val in layer_ids]\n"
        '        if hasattr(self.model, "set_eagle3_layers_to_capture"):\n'
        "            self.model.set_eagle3_layers_to_capture(ids)\n"
        "        else:\n"
        "            self.model.layers_to_capture = ids\n"
    )
    decision, plan = _variant(tmp_path, "enumerated_stack.py", store, guarded)
    assert decision.patched and decision.fixes == (), decision
    assert (
        "def set_eagle3_layers_to_capture(self, layers_to_capture"
        not in (plan.rewritten()["enumerated_stack.py"])
    )
    unguarded = "        self.model.set_eagle3_layers_to_capture([val + 1 for val in layer_ids])\n"
    decision, plan = _variant(tmp_path / "b", "enumerated_stack.py", store, unguarded)
    assert decision.patched
    assert decision.fixes == (
        "adds `EnumStack.set_eagle3_layers_to_capture`, which the hook calls but was "
        "missing (the hook failed even with PP=1)",
    )
    text = plan.rewritten()["enumerated_stack.py"]
    assert "    def set_eagle3_layers_to_capture(self, layers_to_capture" in text
