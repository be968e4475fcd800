"""The family rewriter on synthetic model files (fixtures/upstream/family_*.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import pytest

from codemods.upstream.family import plan_family
from codemods.upstream.family_shapes import analyse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "upstream"
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


def test_selecting_a_model_keeps_the_forward_it_needs(plan):
    selected = plan.select(["family_qwen_derived"])
    assert selected.touched_files == ["family_qwen_base.py", "family_qwen_derived.py"]
    assert "family_qwen_base.py" not in selected.setter_edits
    rewritten = selected.rewritten()
    assert "attach_pp_aux_transport(self.model" not in rewritten["family_qwen_base.py"]
    assert "pp_aux_outgoing(self" in rewritten["family_qwen_base.py"]


def test_selecting_an_unknown_model_is_an_error(plan):
    with pytest.raises(ValueError, match="no_such_model"):
        plan.select(["no_such_model"])


def test_untouched_lines_are_kept_byte_for_byte(plan, models_dir):
    for name, text in plan.rewritten().items():
        original = (models_dir / name).read_text(encoding="utf-8").splitlines()
        new = text.splitlines()
        removed = [line for line in original if line not in new]
        # Only the early returns (and a one-line handoff dict that black explodes) go.
        for line in removed:
            assert line.strip() in {
                "if not self.pp_group.is_last_rank:",
                "if not get_pp_group().is_last_rank:",
                "return",
                "",
            } or line.strip().startswith("return PPProxyTensors({"), (name, line)


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

    from codemods.cli import cli
    from sglang_support.env import git_apply

    root = _mini_tree(tmp_path)
    out = tmp_path / "family.patch"
    outcome = CliRunner().invoke(
        cli,
        ["upstream-patch", str(root), "-o", str(out), "--mode", "direct",
         "--models", "family_llama_like,family_qwen_derived,family_unsupported"],
    )
    assert outcome.exit_code == 0, outcome.output
    assert "2 of 3 model files with a hook patched" in outcome.output
    assert "patched  family_llama_like.py" in outcome.output
    assert "skipped  family_unsupported.py: family_unsupported.py:AfterLayerModel" in (
        outcome.output
    )
    patch = out.read_text()
    touched = [line.split(" b/")[1] for line in patch.splitlines()
               if line.startswith("diff --git")]
    assert touched == [
        "sglang/srt/models/family_llama_like.py",
        "sglang/srt/models/family_qwen_base.py",
        "sglang/srt/models/family_qwen_derived.py",
        "sglang/srt/distributed/pp_aux_transport.py",
        "sglang/srt/distributed/pp_aux_capture.py",
        "sglang/test/test_pp_aux_capture_family.py",
    ]
    assert '+DEFAULT_MODE = "direct"' in patch
    assert git_apply(root, patch, check=True).returncode == 0
    assert git_apply(root, patch).returncode == 0
    test_file = (root / "sglang/test/test_pp_aux_capture_family.py").read_text()
    assert '"family_llama_like",\n        "TinyForCausalLM",\n        "TinyModel",' in test_file
    assert "family_unsupported" not in test_file
    compile(test_file, "test_pp_aux_capture_family.py", "exec")


def test_cli_rejects_a_model_without_a_capture_hook(tmp_path):
    from click.testing import CliRunner

    from codemods.cli import cli

    root = _mini_tree(tmp_path)
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root), "--models", "no_such"])
    assert outcome.exit_code == 2
    assert "no_such" in outcome.output


def test_survey_and_table_describe_every_hook_file(plan):
    from codemods.upstream.family_report import coverage_line, markdown_table, survey

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
    assert coverage_line(plan).startswith("5 of 6 model files")
