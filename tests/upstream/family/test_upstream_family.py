"""The family rewriter on synthetic model files (fixtures/upstream/family_*.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.patchfile import render_patch
from codemods.upstream.family.plan import plan_family
from codemods.upstream.family.survey import analyse

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "upstream"
EXPECTED = FIXTURES / "family_expected"
INPUTS = sorted(p.name for p in FIXTURES.glob("family_*.py"))


def _copy_inputs(target: Path) -> Path:
    for name in INPUTS:
        shutil.copy(FIXTURES / name, target / name)
    return target


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    return _copy_inputs(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def plan(models_dir: Path):
    return plan_family(models_dir)


def test_rewritten_files_match_expected(plan):
    rewritten = plan.rewritten()
    assert sorted(rewritten) == sorted(p.name for p in EXPECTED.glob("*.py"))
    for name, text in rewritten.items():
        assert text == (EXPECTED / name).read_text(encoding="utf-8"), name


def test_decisions_say_why(plan):
    decisions = plan.decisions
    assert decisions["family_llama_like.py"].patched
    assert decisions["family_llama_like.py"].capture_kinds == ("loop-append",)
    assert decisions["family_deepseek_like.py"].capture_kinds == ("layer-kwarg",)
    assert decisions["family_boundaries.py"].capture_kinds == ("boundaries",)
    unsupported = decisions["family_unsupported.py"]
    assert not unsupported.patched
    assert "AfterLayerModel.forward" in unsupported.reason
    assert "captures under `i + 1 in self.layers_to_capture`" in unsupported.reason


def test_inherited_forward_is_patched_in_the_base_file(plan):
    derived = plan.decisions["family_qwen_derived.py"]
    assert derived.patched
    assert str(derived.forward) == "family_qwen_base.py:BaseModel.forward"
    assert [s.class_name for s in plan.forward_edits["family_qwen_base.py"]] == ["BaseModel"]
    assert "family_qwen_derived.py" not in plan.forward_edits


def test_capture_after_the_layer_under_a_condition_is_patched(plan):
    decision = plan.decisions["family_after_layer.py"]
    assert decision.patched, decision.reason
    assert decision.capture_kinds == ("after-layer",)
    (shape,) = plan.forward_edits["family_after_layer.py"]
    assert shape.gate == "capture_aux and hidden_states.shape[0] != 0"
    text = plan.rewritten()["family_after_layer.py"]
    # Every stage captures: the last-rank operand of the condition is gone, the rest kept.
    condition = text.split("capture_aux = (", 1)[1].split(")", 1)[0]
    assert "is_last_rank" not in condition
    assert "self.layers_to_capture is not None" in condition
    # Handoff and gathering run under the same condition as the capture.
    handoff = text.split("if not self.pp_group.is_last_rank:\n            aux_outgoing", 1)[1]
    assert handoff.index("if capture_aux and hidden_states.shape[0] != 0:") < handoff.index(
        "pp_aux_outgoing(self, gated_aux, pp_proxy_tensors)"
    )
    # The last stage gathers inside the handoff's else block, before it reads the list.
    else_block = text.split("        else:\n", 1)[1]
    assert else_block.index("pp_aux_collect(") < else_block.index("len(gated_aux) > 0")


def test_comment_tying_capture_to_the_last_stage_is_named_for_review(plan, tmp_path):
    assert plan.decisions["family_after_layer.py"].stale_comments == ()
    source = (FIXTURES / "family_after_layer.py").read_text(encoding="utf-8")
    stale = "# Capture only on the last pipeline stage, which consumes the list."
    (tmp_path / "stale.py").write_text(
        source.replace("# Capture only when this forward asks for it.", stale),
        encoding="utf-8",
    )
    decision = plan_family(tmp_path).decisions["stale.py"]
    assert decision.patched and decision.stale_comments == (stale,)
    from codemods.upstream.output.family_report import survey

    (record,) = [r for r in survey(plan_family(tmp_path)) if r["file"] == "stale.py"]
    assert record["stale_comments"] == [stale]


def test_ids_under_a_drafter_specific_name_are_followed(plan):
    decision = plan.decisions["family_named_ids.py"]
    assert decision.patched, decision.reason
    text = plan.rewritten()["family_named_ids.py"]
    assert 'ids_attr="dspark_layers_to_capture"' in text
    # The gathering goes inside the `if capture_dspark:` block that returns the list.
    assert "        if capture_dspark:\n            dspark_aux = pp_aux_collect(" in text


def test_stage_dependent_capture_condition_is_refused(plan):
    reason = plan.decisions["family_unsupported.py"].reason
    assert "AfterLayerModel.forward" in reason  # the first unsupported shape in the file
    source = (FIXTURES / "family_unsupported.py").read_text(encoding="utf-8")
    rank_dependent = source[source.index("class RankDependentStack") :]
    module = cst.parse_module("from x import PPProxyTensors\n\n" + rank_dependent)
    (forward,) = analyse(module).forwards
    assert not forward.recognised
    assert "self.keep_layer(i)" in forward.problem
    assert "may differ between PP stages" in forward.problem


def test_hook_and_forward_must_agree_on_the_ids_attribute(tmp_path):
    source = (FIXTURES / "family_named_ids.py").read_text(encoding="utf-8")
    (tmp_path / "mismatch.py").write_text(
        source.replace(
            "self.model.dspark_layers_to_capture = list(layer_ids)",
            "self.model.layers_to_capture = list(layer_ids)",
        ),
        encoding="utf-8",
    )
    decision = plan_family(tmp_path).decisions["mismatch.py"]
    assert not decision.patched
    assert "`layers_to_capture`" in decision.reason
    assert "reads `dspark_layers_to_capture`" in decision.reason


def test_missing_stack_setter_is_added_before_the_forward(plan):
    decision = plan.decisions["family_missing_setter.py"]
    assert decision.patched, decision.reason
    assert decision.fixes == (
        "adds `TextStack.set_dflash_layers_to_capture`, which the hook calls but was "
        "missing (the hook failed even with PP=1)",
    )
    text = plan.rewritten()["family_missing_setter.py"]
    stack = text[text.index("class TextStack") : text.index("class VisionLanguageModel")]
    added = (
        "    def set_dflash_layers_to_capture(self, layers_to_capture: List[int]):\n"
        "        self.layers_to_capture = layers_to_capture\n\n"
        "    def forward("
    )
    assert added in stack


def test_missing_stack_setter_for_a_flag_forward_is_not_invented(tmp_path):
    # A forward that reads per-layer flags needs its own setter: nothing to add.
    source = (FIXTURES / "family_qwen_base.py").read_text(encoding="utf-8")
    start = source.index("    def set_eagle3_layers_to_capture(self, layers_to_capture")
    end = source.index("    def forward(", start)
    (tmp_path / "flags.py").write_text(source[:start] + source[end:], encoding="utf-8")
    decision = plan_family(tmp_path).decisions["flags.py"]
    assert not decision.patched
    assert "does not define (fails with PP=1 too)" in decision.reason


def test_forward_unpacking_the_stack_output_on_every_rank_is_fixed(plan):
    decision = plan.decisions["family_stage_unpack.py"]
    assert decision.patched, decision.reason
    assert "hidden_states, before_norm = self.model(...)" in decision.fixes[0]
    text = plan.rewritten()["family_stage_unpack.py"]
    fixed = (
        "            stage_output = self.model(\n"
        "                input_ids, positions, forward_batch, pp_proxy_tensors=pp_proxy_tensors\n"
        "            )\n"
        "            if not self.pp_group.is_last_rank:\n"
        "                return stage_output\n"
        "            hidden_states, before_norm = stage_output\n"
    )
    assert fixed in text
    # The capture branch runs on the last stage only (the hook resets the flag
    # elsewhere), so it keeps unpacking directly.
    assert "hidden_states, before_norm, aux_hidden_states = self.model(" in text
    assert text.count("stage_output = ") == 1


def test_model_that_refuses_pp_loses_only_its_dead_early_return(plan):
    """Not patched (no relay, no helper call, no declaration): the early return of its hook,
    which never runs, is dropped and nothing else changes (family_expected/)."""
    decision = plan.decisions["family_refuses_pp.py"]
    assert not decision.patched
    assert decision.reason == (
        "the model refuses PP in its constructor (`assert self.pp_group.is_first_rank "
        "and self.pp_group.is_last_rank`): the early return never runs and no capture "
        "is lost; the patch drops it and declares no relay"
    )
    assert decision.dead_returns == ("SingleStageForCausalLM.set_dflash_layers_to_capture",)
    assert decision.cases == ()
    text = plan.rewritten()["family_refuses_pp.py"]
    for absent in ("is_last_rank:", "set_pp_aux_capture", "pp_aux_relay_methods", "import"):
        assert absent not in text.split("class SingleStageForCausalLM")[1], absent


def test_selecting_a_model_keeps_the_forward_it_needs(plan):
    selected = plan.select(["family_qwen_derived"])
    assert selected.touched_files == ["family_qwen_base.py", "family_qwen_derived.py"]
    assert "family_qwen_base.py" not in selected.setter_edits
    rewritten = selected.rewritten()
    assert "set_pp_aux_capture(self.model" not in rewritten["family_qwen_base.py"]
    assert "pp_aux_outgoing(self" in rewritten["family_qwen_base.py"]


def test_selecting_an_unknown_model_is_an_error(plan):
    with pytest.raises(ValueError, match="no_such_model"):
        plan.select(["no_such_model"])


def test_untouched_lines_are_kept_byte_for_byte(plan, models_dir):
    for name, text in plan.rewritten().items():
        original = (models_dir / name).read_text(encoding="utf-8").splitlines()
        new = text.splitlines()
        removed = [line for line in original if line not in new]
        # Only the early returns and the last-rank operand of a capture condition go;
        # a one-line handoff dict is exploded and a shortened condition re-joined, as
        # black lays them out, without changing their text.
        for line in removed:
            stripped = line.strip()
            dropped = stripped in {
                "if not self.pp_group.is_last_rank:",
                "if not get_pp_group().is_last_rank:",
                "return",
                "and self.pp_group.is_last_rank",
                # the capture flag, now set on the last stage only
                "self.capture_aux_hidden_states = True",
                "",
            }
            relaid = stripped.startswith(("return PPProxyTensors({", "{")) or (
                stripped.removeprefix("and ") in text
            )
            # A stack call whose result a forward unpacked on every rank now goes
            # through `stage_output` (the call itself is kept line for line).
            staged = "= " in stripped and ("stage_output = " + stripped.split("= ", 1)[1] in text)
            # An import from SGLang's aux-capture module now also brings the helpers.
            extended = stripped.startswith(f"from {GLUE_MODULE} import ") and all(
                n.strip() in text for n in stripped.split(" import ", 1)[1].split(",")
            )
            assert dropped or relaid or staged or extended, (name, line)


def test_rewritten_files_compile_and_are_not_patched_again(plan, tmp_path):
    again = tmp_path / "again"
    again.mkdir()
    for name, text in plan.rewritten().items():
        compile(text, name, "exec")
        (again / name).write_text(text, encoding="utf-8")
    for name in INPUTS:
        if not (again / name).exists():
            shutil.copy(FIXTURES / name, again / name)
    second = plan_family(again)
    assert second.rewritten() == {}
    assert second.decisions["family_llama_like.py"].reason.startswith("no hook returns early")


def test_early_return_with_other_statements_is_not_recognised():
    source = (
        "class A:\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        if not self.pp_group.is_last_rank:\n"
        "            print('skip')\n"
        "            return\n"
        "        self.model.layers_to_capture = layer_ids\n"
    )
    (setter,) = analyse(cst.parse_module(source)).setters
    assert not setter.early_return


def test_hook_with_a_second_return_is_reported():
    source = (
        "class A:\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        if not self.pp_group.is_last_rank:\n"
        "            return\n"
        "        if layer_ids is None:\n"
        "            return\n"
        "        self.model.layers_to_capture = layer_ids\n"
    )
    (setter,) = analyse(cst.parse_module(source)).setters
    assert setter.early_return
    assert setter.problem == "hook returns before its end in more than one place"


def test_unparseable_model_file_is_reported_and_left_alone(tmp_path):
    models_dir = _copy_inputs(tmp_path)
    broken = models_dir / "family_broken.py"
    broken.write_text("def set_eagle3_layers_to_capture(:\n    pass\n", encoding="utf-8")
    plan = plan_family(models_dir)
    decision = plan.decisions["family_broken.py"]
    assert not decision.patched
    assert decision.reason.startswith("cannot parse")
    assert "family_broken.py" not in plan.rewritten()


# ------------------------------------------------------------------ upstream-patch CLI

MINI_SGLANG = FIXTURES / "mini_sglang"


def _mini_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(MINI_SGLANG / "sglang", root / "sglang")
    _copy_inputs(root / "sglang" / "srt" / "models")
    return root


def test_cli_patches_the_chosen_models_and_reports_every_hook_file(tmp_path):
    from click.testing import CliRunner
    from sglang_support.env import git_apply

    from codemods.cli.commands import cli

    root = _mini_tree(tmp_path)
    out = tmp_path / "family.patch"
    body = tmp_path / "pr.md"
    tests_dir = tmp_path / "shipped-tests"
    models = "family_llama_like,family_qwen_derived,family_unsupported"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(root),
            "-o",
            str(out),
            "--models",
            models,
            "--pr-body",
            str(body),
            "--tests-dir",
            str(tests_dir),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    assert "2 of 3 model files with a hook patched" in outcome.output
    assert "patched  family_llama_like.py" in outcome.output
    assert "skipped  family_unsupported.py: family_unsupported.py:AfterLayerModel" in (
        outcome.output
    )
    # A package tree has no test folder: the tests are left out of the patch, said so,
    # and written where --tests-dir says.
    assert "tests left out of the patch" in outcome.output
    assert f"written to {tests_dir.resolve()} instead" in outcome.output
    patch = out.read_text()
    touched = [line.split(" b/")[1] for line in patch.splitlines() if line.startswith("diff --git")]
    # Only the tests' utilities go into the package, beside SGLang's own (sglang/test/).
    assert [path for path in touched if "/test/" in path or "test_" in path] == [
        "sglang/test/pp_aux_capture_family_models.py"
    ]
    assert "sglang/srt/models/family_llama_like.py" in touched
    assert "sglang/srt/layers/aux_hidden_states.py" in touched
    assert git_apply(root, patch, check=True).returncode == 0
    assert git_apply(root, patch).returncode == 0
    assert sorted(p.name for p in (root / "sglang/test").iterdir()) == [
        "pp_aux_capture_family_models.py"
    ]
    assert sorted(p.name for p in tests_dir.iterdir()) == [
        "test_pp_aux_capture.py",
        "test_pp_aux_capture_family.py",
    ]
    test_file = (tests_dir / "test_pp_aux_capture_family.py").read_text()
    assert '"family_llama_like",\n        "TinyForCausalLM",\n        "TinyModel",' in test_file
    assert "family_unsupported" not in test_file
    compile(test_file, "test_pp_aux_capture_family.py", "exec")
    # The test imports its stand-in models from the package's test utilities.
    assert "from sglang.test.pp_aux_capture_family_models import (" in test_file
    models_file = (root / "sglang/test/pp_aux_capture_family_models.py").read_text()
    compile(models_file, "pp_aux_capture_family_models.py", "exec")
    assert "def build_model(" in models_file and "def build_model(" not in test_file
    init_test = (tests_dir / "test_pp_aux_capture.py").read_text()
    compile(init_test, "test_pp_aux_capture.py", "exec")
    assert 'PATCHED = [\n    "family_llama_like",\n    "family_qwen_derived",\n]' in init_test
    # The PR body's test section says where the tests are and how to run them.
    text = body.read_text()
    assert text.count("are left out of this patch") == 1
    assert text.count(f"They were written to `{tests_dir.resolve()}`.") == 1
    modifications = text.split("## Modifications", 1)[1].split("## Accuracy Tests", 1)[0]
    assert "- Tests: none in this patch (see Accuracy Tests).\n" in modifications
    assert "are left out of this patch" in text.split("## Accuracy Tests", 1)[1]
    assert f"cd {tests_dir.resolve()} && python3 -m unittest test_pp_aux_capture" in text


def test_cli_counts_a_file_rid_of_its_dead_early_return_as_patched(tmp_path):
    """A model that refuses PP is changed (its dead early return dropped): never "skipped",
    and counted with every other model file the patch changes."""
    from click.testing import CliRunner

    from codemods.cli.commands import cli

    root = _mini_tree(tmp_path)
    out = tmp_path / "family.patch"
    models = "family_llama_like,family_refuses_pp,family_unsupported"
    outcome = CliRunner().invoke(
        cli, ["upstream-patch", str(root), "-o", str(out), "--models", models]
    )
    assert outcome.exit_code == 0, outcome.output
    patch = out.read_text()
    assert "diff --git a/sglang/srt/models/family_refuses_pp.py" in patch
    assert "2 of 3 model files with a hook patched" in outcome.output
    assert "patched  family_refuses_pp.py: drops the early return off the last rank" in (
        outcome.output
    )
    assert "skipped  family_refuses_pp.py" not in outcome.output
    assert "skipped  family_unsupported.py" in outcome.output


def test_cli_without_tests_dir_says_how_to_get_the_tests(tmp_path):
    from click.testing import CliRunner

    from codemods.cli.commands import cli

    root = _mini_tree(tmp_path)
    body = tmp_path / "pr.md"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(root),
            "-o",
            str(tmp_path / "p.patch"),
            "--models",
            "family_llama_like",
            "--pr-body",
            str(body),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    assert "pass --tests-dir DIR to write them to a folder" in outcome.output
    assert "`auxcap upstream-patch --tests-dir DIR` writes them to a folder." in (body.read_text())
    assert "unittest" not in body.read_text()


def test_checkout_patch_carries_the_tests_under_test_registered_unit_models(tmp_path):
    from codemods.upstream.generate import generate

    root = tmp_path / "checkout"
    shutil.copytree(MINI_SGLANG / "sglang", root / "python" / "sglang")
    _copy_inputs(root / "python" / "sglang" / "srt" / "models")
    result = generate(root, models=["family_llama_like"])
    assert not result.tests_left_out and result.tests_note is None
    tests = [path for path in result.changed if path.startswith("test/")]
    assert sorted(tests) == [
        "test/registered/unit/models/test_pp_aux_capture.py",
        "test/registered/unit/models/test_pp_aux_capture_family.py",
    ]
    # Their shared utilities sit where SGLang keeps its test utilities.
    assert "python/sglang/test/pp_aux_capture_family_models.py" in result.changed


def test_cli_rejects_a_model_without_a_capture_hook(tmp_path):
    from click.testing import CliRunner

    from codemods.cli.commands import cli

    root = _mini_tree(tmp_path)
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root), "--models", "no_such"])
    assert outcome.exit_code == 2
    assert "no_such" in outcome.output


def test_survey_and_table_describe_every_hook_file(plan):
    from codemods.upstream.output.family_report import coverage_line, markdown_table, survey

    records = {record["file"]: record for record in survey(plan)}
    assert set(records) == set(plan.decisions)
    llama = records["family_llama_like.py"]
    assert llama["early_return"] == [
        "TinyForCausalLM.set_eagle3_layers_to_capture",
        "TinyForCausalLM.set_dflash_layers_to_capture",
    ]
    assert llama["handoff"] == "PPProxyTensors({...})"
    assert records["family_deepseek_like.py"]["handoff"] == "PPProxyTensors(name)"
    assert records["family_qwen_base.py"]["last_stage_captures_output"] is True
    assert not records["family_unsupported.py"]["patched"]

    table = markdown_table(plan, {"family_llama_like": "yes"})
    rows = [row for row in table.splitlines() if row.startswith("| `")]
    assert len(rows) == len(plan.decisions)
    llama_row = next(row for row in rows if "family_llama_like.py" in row)
    assert "`eagle3`, `dflash`" in llama_row and llama_row.endswith("| yes |")
    unsupported = next(row for row in rows if "family_unsupported.py" in row)
    assert "| no: " in unsupported and unsupported.endswith("| - |")
    assert coverage_line(plan).startswith("9 of 11 model files")


def test_separate_fixes_are_patches_of_their_own_that_the_capture_patch_builds_on(tmp_path):
    from sglang_support.env import git_apply

    from codemods.upstream.generate import generate
    from codemods.upstream.output import series

    root = _mini_tree(tmp_path)
    result = generate(root, models=["family_missing_setter", "family_stage_unpack"])
    patches = series.build_series(result)
    keys = [p.key for p in patches]
    fixes = [k for k in keys if k.startswith(series.FIX)]
    assert fixes == ["fix-family_missing_setter", "fix-family_stage_unpack"]
    # Right after the runtime, before any capture patch.
    assert keys.index(fixes[0]) == 1 and keys.index(fixes[1]) == 2
    for key in fixes:
        (patch,) = [p for p in patches if p.key == key]
        (change,) = patch.changes
        assert patch.subject.startswith(f"[Fix] {key.removeprefix(series.FIX)}: ")
        added = [
            line
            for line in render_patch([change]).splitlines()
            if line.startswith("+") and not line.startswith("+++")
        ]
        # Nothing about capture under PP: no helper call, no import of the helpers.
        assert added and not any("pp_aux" in line for line in added), added
    setter_fix = next(p for p in patches if p.key == fixes[0])
    assert setter_fix.subject.endswith(": add TextStack.set_dflash_layers_to_capture")
    # Applied in order, the series ends where the single patch does.
    for patch in patches:
        assert git_apply(root, render_patch(patch.changes)).returncode == 0, patch.key
    for change in result.changes:
        assert (root / change.path).read_text() == change.new, change.path


def test_a_subclass_with_its_own_stack_gets_it_patched_and_declares_its_relay(plan):
    """``OwnStackForCausalLM`` keeps the hooks of ``TinyForCausalLM`` but builds its own
    stack (``_init_model``): that stack's forward is rewritten, and the subclass declares
    the relay itself (the base's declaration does not cover a class with ``__init__``)."""
    decision = plan.decisions["family_own_stack.py"]
    assert decision.patched, decision.reason
    assert decision.inherits == "family_llama_like.py:TinyForCausalLM"
    assert decision.hooks == () and decision.early_return == ()
    assert str(decision.forward) == "family_own_stack.py:OwnStackModel.forward"
    assert decision.cases == (
        (
            "OwnStackForCausalLM",
            "OwnStackModel",
            ("set_eagle3_layers_to_capture", "set_dflash_layers_to_capture"),
        ),
    )
    assert plan.relay_declarations["family_own_stack.py"] == [
        ("OwnStackForCausalLM", ("EAGLE3", "DFLASH"))
    ]


def test_a_subclass_whose_stack_cannot_relay_stays_refused(tmp_path):
    """Its stack's forward is not one the family rewrites (no PP split): not patched, not
    declared, and the reason names the stack and what it lacks."""
    for name in ("family_llama_like.py", "family_own_stack.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    path = tmp_path / "family_own_stack.py"
    text = path.read_text()
    old = "        for layer_idx, layer in enumerate(\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "        for layer_idx, layer in zip(\n"))
    decision = plan_family(tmp_path).decisions["family_own_stack.py"]
    assert not decision.patched
    assert decision.reason.startswith(
        "OwnStackForCausalLM inherits the hooks of family_llama_like.py:TinyForCausalLM "
        "but builds its stack from OwnStackModel: family_own_stack.py:OwnStackModel.forward: "
    )
    assert decision.reason.endswith(
        "it declares no relay, so aux capture under PP stays refused for it"
    )
    assert "family_own_stack.py" not in plan_family(tmp_path).rewritten()
