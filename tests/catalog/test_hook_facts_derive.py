"""The derivation rules of codemods.catalog.derive (scripts/derive_hook_facts.py) on synthetic
model files.

``fixtures/hook_facts/tree`` is laid out like an unpacked SGLang wheel (``sglang/srt/models``);
each file there exercises one rule, and each test states what the rule must give.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hook_facts_script import FIXTURE_TREE, SCRIPT, release_view

from codemods.catalog import derive

DSPARK = "set_dspark_layers_to_capture"
DFLASH = "set_dflash_layers_to_capture"
EAGLE3 = "set_eagle3_layers_to_capture"


@pytest.fixture(scope="module")
def facts() -> dict:
    return derive.derive_release(FIXTURE_TREE)


def test_raise_under_pp_wins_over_a_later_early_return(facts):
    setter = facts[DSPARK]["pp_raise.py::RaisingForCausalLM"]
    assert setter["pp"] == "raises"
    assert setter["pp_raise"] == {
        "type": "NotImplementedError",
        "message": "synthetic DSPARK capture requires PP=1.",
    }
    assert setter["models"] == ["RaisingForCausalLM"]


def test_value_error_under_pp_read_from_an_inner_module(facts):
    setter = facts[DFLASH]["pp_value_error.py::ValueErrorForCausalLM"]
    assert setter["pp"] == "raises"
    assert setter["pp_raise"]["type"] == "ValueError"
    assert setter["pp_raise"]["message"] == "synthetic DFLASH capture requires PP=1"


def test_early_return_on_non_last_ranks(facts):
    for hook in (EAGLE3, DFLASH):
        assert facts[hook]["early_return.py::EarlyForCausalLM"]["pp"] == "skips_non_last_ranks"
        assert "pp_raise" not in facts[hook]["early_return.py::EarlyForCausalLM"]


def test_work_only_on_the_last_rank_is_a_silent_skip(facts):
    setter = facts[EAGLE3]["early_return.py::LastRankBlockForCausalLM"]
    assert setter["pp"] == "skips_non_last_ranks"
    assert setter["none"] == "default_layers"


def test_setter_without_pp_test_runs_on_every_rank(facts):
    assert facts[EAGLE3]["none_rules.py::RebindForCausalLM"]["pp"] == "runs"


def test_none_rejected_with_type_and_message(facts):
    setter = facts[DFLASH]["early_return.py::EarlyForCausalLM"]
    assert setter["none"] == "rejected"
    assert setter["none_raise"] == {
        "type": "ValueError",
        "message": "synthetic DFLASH requires explicit layer_ids.",
    }


def test_none_rejected_by_a_falsy_test_keeps_the_f_string_source(facts):
    setter = facts[DSPARK]["none_rules.py::FalsyRejectForCausalLM"]
    assert setter["none"] == "rejected"
    assert setter["none_raise"]["message"] == (
        "f'synthetic DSPARK ids must be non-empty: {layer_ids}'"
    )


def test_none_means_default_layers(facts):
    assert facts[EAGLE3]["early_return.py::EarlyForCausalLM"]["none"] == "default_layers"
    assert facts[EAGLE3]["none_rules.py::RebindForCausalLM"]["none"] == "default_layers"


def test_none_ignored_and_none_used_as_a_list(facts):
    assert facts[DFLASH]["none_rules.py::IgnoreForCausalLM"]["none"] == "ignored"
    # sorted(set(None)) fails before the ValueError: not a rejection of None.
    assert facts[DFLASH]["none_rules.py::SortedCheckForCausalLM"]["none"] == "unchecked"
    # tuple(None) fails before `if not layer_ids: raise`.
    assert facts[DFLASH]["pp_value_error.py::ValueErrorForCausalLM"]["none"] == "unchecked"


def test_failing_asserts_raise_assertion_error(facts):
    setter = facts[DFLASH]["none_rules.py::AssertingForCausalLM"]
    assert setter["pp"] == "raises"
    assert setter["pp_raise"] == {
        "type": "AssertionError",
        "message": "synthetic DFLASH asserts PP=1",
    }
    assert setter["none"] == "rejected"
    assert setter["none_raise"] == {"type": "AssertionError", "message": None}
    assert setter["models"] == ["AssertingForCausalLM"]


def test_delegation_to_an_inner_model_imported_from_another_file(facts):
    setter = facts[DSPARK]["wrappers.py::OuterForConditionalGeneration"]
    assert setter["via"] == ["pp_raise.py::RaisingForCausalLM.set_dspark_layers_to_capture"]
    assert setter["pp"] == "raises"
    assert setter["pp_raise"]["type"] == "NotImplementedError"
    assert setter["none"] == "rejected"
    assert setter["none_raise"]["message"] == "synthetic DSPARK needs explicit layer ids."


def test_delegation_to_another_hook_of_the_same_class(facts):
    setter = facts[DFLASH]["wrappers.py::OuterForConditionalGeneration"]
    assert setter["via"] == [
        "wrappers.py::OuterForConditionalGeneration.set_dspark_layers_to_capture"
    ]
    assert setter["pp"] == "raises"


def test_delegation_behind_hasattr_through_an_import_alias(facts):
    setter = facts[EAGLE3]["wrappers.py::OuterForConditionalGeneration"]
    assert setter["via"] == ["early_return.py::EarlyForCausalLM.set_eagle3_layers_to_capture"]
    assert setter["pp"] == "skips_non_last_ranks"
    assert setter["none"] == "default_layers"


def test_delegation_to_a_model_built_by_a_factory_method(facts):
    # The base class assigns self.llm = self.init_llm(...); the subclass's init_llm returns
    # one of two classes, of which only RaisingForCausalLM has the hook.
    setter = facts[DSPARK]["wrappers.py::FactoryForConditionalGeneration"]
    assert setter["via"] == ["pp_raise.py::RaisingForCausalLM.set_dspark_layers_to_capture"]
    assert setter["pp"] == "raises"
    assert setter["models"] == [
        "DispatchingForConditionalGeneration",
        "FactoryForConditionalGeneration",
    ]


def test_models_include_an_architecture_forwarding_attribute_access(facts):
    # DispatchingForConditionalGeneration has no setter; __getattr__ forwards to an instance
    # of a class picked from a module-level table.
    assert (
        "DispatchingForConditionalGeneration"
        in (facts[DSPARK]["wrappers.py::FactoryForConditionalGeneration"]["models"])
    )
    assert (
        "DispatchingForConditionalGeneration"
        in (facts[EAGLE3]["wrappers.py::OpaqueForCausalLM"]["models"])
    )
    assert (
        "DispatchingForConditionalGeneration"
        not in (facts[DSPARK]["pp_raise.py::RaisingForCausalLM"]["models"])
    )


def test_unresolvable_delegate_is_reported_not_guessed(facts):
    setter = facts[EAGLE3]["wrappers.py::OpaqueForCausalLM"]
    assert setter["pp"] == setter["none"] == "unresolved"
    assert setter["unresolved"] == ["self.model.set_eagle3_layers_to_capture"]


def test_models_follow_inheritance_and_entry_classes(facts):
    assert facts[EAGLE3]["early_return.py::EarlyForCausalLM"]["models"] == [
        "EarlyForCausalLM",
        "InheritingForCausalLM",
    ]
    # Not registered anywhere: kept, with no models.
    assert facts["set_medusa_layers_to_capture"]["sub/other_hook.py::InnerOnlyModel"] == {
        "models": [],
        "none": "unchecked",
        "pp": "runs",
    }


def test_only_capture_hooks_are_collected(facts):
    assert set(facts) == {DFLASH, DSPARK, EAGLE3, "set_medusa_layers_to_capture"}
    assert not any("set_layers" in s for setters in facts.values() for s in setters)


def test_mutual_delegation_terminates_as_unresolved():
    source = (
        "class Loop:\n"
        "    def set_dflash_layers_to_capture(self, ids):\n"
        "        self.set_dspark_layers_to_capture(ids)\n"
        "    def set_dspark_layers_to_capture(self, ids):\n"
        "        self.set_dflash_layers_to_capture(ids)\n"
        "EntryClass = Loop\n"
    )
    facts = derive.derive(derive.ModelIndex.from_sources({"loop.py": source}))
    assert facts[DFLASH]["loop.py::Loop"]["pp"] == "unresolved"
    assert facts[DSPARK]["loop.py::Loop"]["models"] == ["Loop"]


def test_unparsable_model_file_is_named(tmp_path):
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "broken.py").write_text("class X(:\n    def set_dflash_layers_to_capture(self)\n")
    with pytest.raises(derive.HookFactsError, match=r"broken\.py: cannot parse"):
        derive.derive_release(tmp_path)


def test_tree_without_model_directory_is_named(tmp_path):
    with pytest.raises(derive.HookFactsError, match="no sglang/srt/models directory"):
        derive.derive_release(tmp_path)


def test_merge_lists_each_distinct_variant_once_with_its_releases(facts):
    changed = json.loads(json.dumps(facts))
    changed[DSPARK]["pp_raise.py::RaisingForCausalLM"]["pp"] = "runs"
    del changed[DSPARK]["pp_raise.py::RaisingForCausalLM"]["pp_raise"]
    data = derive.merge({"1.0.1": changed, "1.0.0": facts, "1.0.2": facts})
    assert data["releases"] == ["1.0.0", "1.0.1", "1.0.2"]
    variants = data["hooks"][DSPARK]["pp_raise.py::RaisingForCausalLM"]
    assert [(v["releases"], v["pp"]) for v in variants] == [
        (["1.0.0", "1.0.2"], "raises"),
        (["1.0.1"], "runs"),
    ]
    for release in data["releases"]:
        expected = changed if release == "1.0.1" else facts
        assert release_view(data, release) == expected


def test_script_writes_then_checks_deterministically(tmp_path):
    out = tmp_path / "facts.json"
    tree = f"9.9.9={FIXTURE_TREE}"
    run = [sys.executable, str(SCRIPT), "--tree", tree, "--output", str(out)]
    first = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    text = out.read_text()
    assert json.loads(text)["releases"] == ["9.9.9"]
    assert derive.dumps(json.loads(text)) == text
    check = subprocess.run([*run, "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
    out.write_text(text.replace('"runs"', '"raises"', 1))
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1
    assert "out of date" in stale.stderr


def test_script_reports_a_bad_tree_with_exit_2(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--tree",
            f"1.0={tmp_path}",
            "--output",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert str(tmp_path) in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_file_with_byte_order_mark_is_read():
    assert Path(FIXTURE_TREE, "sglang", "srt", "models", "bom.py").read_bytes()[:3] == (
        b"\xef\xbb\xbf"
    )
    index = derive.ModelIndex.from_tree(FIXTURE_TREE)
    assert index.modules["bom.py"].entry == []
    assert "sub/other_hook.py" in index.modules
