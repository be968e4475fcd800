"""The family rewriter on synthetic model files of the layer-entry capture shape
(``fixtures/upstream/entry/``): decoder stacks that hand ``aux_hidden_states.capture`` to
the layers they capture at (or the list itself to flagged layers, the gathered collector)
and hand off with ``residual_batch.to_pp``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.family import registry
from codemods.upstream.family.plan import plan_family
from codemods.upstream.output.family_report import markdown_table, survey

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream"
INPUTS = FIXTURES / "entry"
EXPECTED = FIXTURES / "entry_expected"
NAMES = sorted(path.name for path in INPUTS.glob("*.py"))
DECODER = (INPUTS / "entry_decoder.py").read_text()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    models = tmp_path_factory.mktemp("entry")
    for name in NAMES:
        shutil.copy(INPUTS / name, models / name)
    return plan_family(models)


def test_fixtures_are_there():
    assert NAMES == [
        "entry_decoder.py",
        "entry_final.py",
        "entry_gated.py",
        "entry_gathered.py",
        "entry_gathered_ids.py",
        "entry_overlap.py",
    ]


def test_rewritten_files_match_expected(plan):
    rewritten = plan.rewritten()
    assert sorted(rewritten) == NAMES
    for name in NAMES:
        assert rewritten[name] == (EXPECTED / name).read_text(), name


def test_decisions_name_the_shape(plan):
    for name in NAMES:
        decision = plan.decisions[name]
        assert decision.patched, decision.reason
        kind = "entry-gathered" if name.startswith("entry_gathered") else "entry-callback"
        assert decision.capture_kinds == (kind,)
    assert plan.decisions["entry_decoder.py"].cases == (
        ("TinyForCausalLM", "TinyStack", ("set_eagle3_layers_to_capture",)),
    )
    assert plan.decisions["entry_final.py"].final_capture
    assert not plan.decisions["entry_decoder.py"].final_capture
    assert plan.decisions["entry_gated.py"].cases == (
        ("GatedForCausalLM", "GatedStack", ("set_dflash_layers_to_capture",)),
    )
    # The hook asks ``get_parallel().pp_group``; the list goes to layers by capture id.
    assert plan.decisions["entry_gathered_ids.py"].cases == (
        ("IdForCausalLM", "IdStack", ("set_eagle3_layers_to_capture",)),
    )


def test_gathered_by_id_keeps_the_hooks_pp_group(plan):
    text = plan.rewritten()["entry_gathered_ids.py"]
    assert (
        "set_pp_aux_capture(\n"
        "            self.model, get_parallel().pp_group, hidden_size=self.config.hidden_size\n"
        "        )"
    ) in text
    assert text.count("return\n") == 0
    assert (
        "        )\n"
        "\n"
        "        captured = pp_aux_collect(self, captured, pp_proxy_tensors)\n"
        "        if len(captured) == 0:\n"
    ) in text


def test_handoff_and_gathering_are_where_the_captures_are_read(plan):
    decoder = plan.rewritten()["entry_decoder.py"]
    assert (
        "            return pp_aux_handoff(\n"
        "                self,\n"
        "                residual_batch.to_pp(hidden_states, forward_batch),\n"
        "                aux_hidden_states,\n"
        "                pp_proxy_tensors,\n"
        "            )\n"
    ) in decoder
    # After the final norm (hidden_states is a plain tensor there), before the first
    # reader; the comment stays with the statement it describes.
    norm = decoder.index("residual_batch.final_norm(")
    collect = decoder.index("aux_hidden_states = pp_aux_collect(")
    comment = decoder.index("# Callers unpack a pair")
    assert norm < collect < comment
    gated = plan.rewritten()["entry_gated.py"]
    assert (
        "            hidden_states = residual_batch.complete_output(hidden_states, "
        "forward_batch)\n"
        "            aux = pp_aux_collect(self, aux, pp_proxy_tensors)\n"
        "            if len(aux) == 0:\n"
    ) in gated
    # Only the glue names a file uses are imported.
    assert "pp_aux_outgoing" not in decoder and "pp_aux_outgoing" not in gated


def test_rewritten_files_compile_and_are_not_patched_again(plan, tmp_path):
    for name, text in plan.rewritten().items():
        compile(text, name, "exec")
        (tmp_path / name).write_text(text)
    again = plan_family(tmp_path)
    assert again.rewritten() == {}
    for decision in again.decisions.values():
        assert not decision.patched
        assert decision.reason == "no hook returns early on non-last PP ranks"


def test_untouched_lines_are_kept(plan):
    for name in NAMES:
        original = (INPUTS / name).read_text().splitlines()
        new = plan.rewritten()[name].splitlines()
        removed = [line for line in original if line not in new]
        assert all(
            "to_pp" in line
            or "is_last_rank" in line
            or line.strip() in ("return", "", "self.capture_aux_hidden_states = True")
            # SGLang's aux-capture module's import, now also of the helpers
            or line.startswith(f"from {GLUE_MODULE} import AuxHiddenState")
            for line in removed
        ), removed


def test_survey_and_table_describe_the_shape(plan):
    records = {record["file"]: record for record in survey(plan)}
    assert records["entry_decoder.py"]["handoff"] == registry.handoff("to_pp")
    assert records["entry_decoder.py"]["capture_kinds"] == ["entry-callback"]
    table = markdown_table(plan)
    row = next(line for line in table.splitlines() if "entry_gated.py" in line)
    assert registry.describe("entry-callback") in row and "| yes (" in row
    row = next(line for line in table.splitlines() if "entry_gathered.py" in line)
    assert registry.describe("entry-gathered") in row and "| yes (" in row


#: Variants of ``entry_decoder.py`` the rewriter must refuse, with the reason it gives.
REFUSED = {
    "unguarded output capture": (
        "hidden_states = residual_batch.final_norm(hidden_states, forward_batch, self.norm)",
        "hidden_states = residual_batch.final_norm(\n"
        "            hidden_states, forward_batch, self.norm, capture=aux_hidden_states.capture\n"
        "        )",
        "`aux_hidden_states` is filled other than by the layers and the stage-output capture",
    ),
    "list handed by another layer's id": (
        "capture_output=aux_hidden_states.capture\n"
        "                if i in self.layers_to_capture\n"
        "                else None,",
        "captured_last_layer_outputs=aux_hidden_states\n"
        "                if i + 1 in self.layers_to_capture\n"
        "                else None,",
        "the layers get the capture list itself (`captured_last_layer_outputs=aux_hidden_states`)",
    ),
    "other loop range": (
        "for i in range(self.start_layer, self.end_layer):",
        "for i in range(self.start_layer, self.first_fused_layer):",
        "the capturing loop is not `for i in range(self.start_layer, self.end_layer)`",
    ),
    "appended elsewhere": (
        "        # Callers unpack",
        "        aux_hidden_states.append(hidden_states)\n        # Callers unpack",
        "`aux_hidden_states` is filled other than by the layers and the stage-output capture",
    ),
    "never read": (
        "        if len(aux_hidden_states) == 0:\n"
        "            return hidden_states\n"
        "        return hidden_states, aux_hidden_states\n",
        "        return hidden_states\n",
        "the last stage never reads `aux_hidden_states`",
    ),
    "no handoff": (
        "return residual_batch.to_pp(hidden_states, forward_batch)",
        "return hidden_states",
        "no `return residual_batch.to_pp(...)` under `if not ...is_last_rank`",
    ),
    "no pp_proxy_tensors": (
        "pp_proxy_tensors: Optional[PPProxyTensors] = None,",
        "proxy: Optional[PPProxyTensors] = None,",
        "forward takes no pp_proxy_tensors",
    ),
    "ids read again": (
        "        # Callers unpack",
        "        assert self.layers_to_capture is not None\n        # Callers unpack",
        "reads capture ids outside the layer call",
    ),
}


def test_output_captured_after_the_handoff_is_gathered_last(tmp_path):
    """The last stage captures its output through the final norm (capture id ==
    number of layers): the gathering follows that capture and keeps it last."""
    old = "hidden_states = residual_batch.final_norm(hidden_states, forward_batch, self.norm)"
    new = (
        "hidden_states = residual_batch.final_norm(\n"
        "            hidden_states,\n"
        "            forward_batch,\n"
        "            self.norm,\n"
        "            capture=aux_hidden_states.append\n"
        "            if self.end_layer in self.layers_to_capture\n"
        "            else None,\n"
        "        )"
    )
    (tmp_path / "entry_decoder.py").write_text(DECODER.replace(old, new))
    plan = plan_family(tmp_path)
    decision = plan.decisions["entry_decoder.py"]
    assert decision.patched and decision.final_capture, decision.reason
    text = plan.rewritten()["entry_decoder.py"]
    assert (
        "            else None,\n"
        "        )\n"
        "\n"
        "        aux_hidden_states = pp_aux_collect(\n"
        "            self, aux_hidden_states, pp_proxy_tensors, final=True\n"
        "        )\n"
        "        # Callers unpack a pair"
    ) in text


def test_a_flag_gated_list_beside_the_callback_is_accepted(tmp_path):
    """Layers that also take the list itself when a layer flag is set (a second capture
    route, unused by the hooks): the callback is the capture point; a capture taken the
    other way would not match the stage's layers and raise in the gathering."""
    old = "                capture_output=aux_hidden_states.capture\n"
    new = (
        "                captured_last_layer_outputs=aux_hidden_states\n"
        '                if getattr(self.layers[i], "_is_layer_to_capture", False)\n'
        "                else None,\n" + old
    )
    (tmp_path / "entry_decoder.py").write_text(DECODER.replace(old, new))
    plan = plan_family(tmp_path)
    assert plan.decisions["entry_decoder.py"].patched, plan.decisions["entry_decoder.py"]
    assert "return pp_aux_handoff(" in plan.rewritten()["entry_decoder.py"]


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unrecognised_variants_are_reported_and_left_alone(case, tmp_path):
    old, new, reason = REFUSED[case]
    assert DECODER.count(old) == 1, case
    source = DECODER.replace(old, new)
    path = tmp_path / "entry_decoder.py"
    path.write_text(source)
    plan = plan_family(tmp_path)
    decision = plan.decisions["entry_decoder.py"]
    assert not decision.patched
    assert reason in decision.reason, decision.reason
    assert decision.reason.startswith("entry_decoder.py:TinyStack.forward: ")
    assert plan.rewritten() == {}
    assert path.read_text() == source


#: The overlap fixture: the loop range is two locals narrowed for two-batch overlap.
OVERLAP = (INPUTS / "entry_overlap.py").read_text()
#: Variants of ``entry_overlap.py`` the rewriter must refuse, with the reason it gives.
OVERLAP_REFUSED = {
    "end not the stage end": (
        "normal_end_layer = self.end_layer\n",
        "normal_end_layer = self.end_layer - 1\n",
        "`normal_end_layer` is not set once to `self.end_layer` before the loop",
    ),
    "narrowed without the overlap test": (
        "if forward_batch.can_run_tbo:",
        "if forward_batch.is_extend:",
        "`normal_start_layer` changes other than under a `can_run_tbo` test",
    ),
    "changed in the loop": (
        "                else None,\n            )\n",
        "                else None,\n            )\n            normal_end_layer -= 1\n",
        "`normal_end_layer` changes in or after the loop",
    ),
    "same name twice": (
        "for i in range(normal_start_layer, normal_end_layer):",
        "for i in range(normal_end_layer, normal_end_layer):",
        "the loop's start and end are the same name",
    ),
}


def test_overlap_loop_is_rewritten_and_gathers_after_the_last_rank_block(plan):
    decision = plan.decisions["entry_overlap.py"]
    assert decision.patched and decision.capture_kinds == ("entry-callback",)
    text = plan.rewritten()["entry_overlap.py"]
    assert (
        "                    hidden_states, forward_batch, self.norm\n"
        "                )\n"
        "        aux_hidden_states = pp_aux_collect(self, aux_hidden_states, pp_proxy_tensors)\n"
    ) in text
    assert "for i in range(normal_start_layer, normal_end_layer):" in text


@pytest.mark.parametrize("case", sorted(OVERLAP_REFUSED))
def test_unrecognised_overlap_variants_are_reported_and_left_alone(case, tmp_path):
    old, new, reason = OVERLAP_REFUSED[case]
    assert OVERLAP.count(old) == 1, case
    source = OVERLAP.replace(old, new)
    path = tmp_path / "entry_overlap.py"
    path.write_text(source)
    plan = plan_family(tmp_path)
    decision = plan.decisions["entry_overlap.py"]
    assert not decision.patched
    assert reason in decision.reason, decision.reason
    assert "nor a range narrowed for two-batch overlap" in decision.reason
    assert plan.rewritten() == {}
    assert path.read_text() == source
