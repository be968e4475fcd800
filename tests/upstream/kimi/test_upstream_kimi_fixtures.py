"""The Kimi-Linear rewriter on synthetic model files (``fixtures/upstream/kimi_*.py``) that
keep Kimi-Linear's structure but differ in formatting, names and surrounding code; plus the
already-supported and unrecognised shapes, tree layouts, idempotence, and the CLI's exit
codes.  Patched fixtures are driven as real pipeline stages over the mini ``sglang`` tree
(``fixtures/upstream/mini_sglang``) and must match their PP=1 run exactly."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import libcst as cst
import pytest
from click.testing import CliRunner
from sglang_support.env import PROJECT_ROOT, git_apply, run_python

from codemods.cli.commands import cli
from codemods.upstream.edit.runtime import render_glue
from codemods.upstream.generate import generate
from codemods.upstream.kimi import linear as kimi

FIXTURES = PROJECT_ROOT / "fixtures" / "upstream"
MINI_SGLANG = FIXTURES / "mini_sglang"
PATCHABLE = ("kimi_reformatted.py", "kimi_renamed.py", "kimi_extra_code.py")
MODEL = "srt/models/kimi_linear.py"


def _tree(tmp_path: Path, fixture: str, layout: str = "package") -> tuple[Path, str]:
    """A tree with the mini sglang package and ``fixture`` as its Kimi-Linear file."""
    root = tmp_path / f"{layout}-{fixture[:-3]}"
    package = root / "python" / "sglang" if layout == "checkout" else root / "sglang"
    shutil.copytree(MINI_SGLANG / "sglang", package)
    shutil.copyfile(FIXTURES / fixture, package / MODEL)
    prefix = "python/sglang" if layout == "checkout" else "sglang"
    return root, f"{prefix}/{MODEL}"


def _removed_and_added(patch: str, path: str) -> tuple[list[str], list[str]]:
    section = patch.split(f"diff --git a/{path} b/{path}\n", 1)[1].split("diff --git", 1)[0]
    lines = section.splitlines()
    removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    return removed, added


@pytest.mark.parametrize("fixture", PATCHABLE)
def test_patch_applies_compiles_and_is_idempotent(tmp_path, fixture):
    root, model_path = _tree(tmp_path, fixture)
    original = (root / model_path).read_text()
    result = generate(root)
    assert result.model("kimi_linear").status == kimi.NEEDS_PATCH
    assert result.changed == [model_path, "sglang/srt/layers/aux_hidden_states.py"]
    assert git_apply(root, result.patch, check=True).returncode == 0
    assert git_apply(root, result.patch).returncode == 0
    new = (root / model_path).read_text()
    compile(new, model_path, "exec")
    assert (root / "sglang/srt/layers/aux_hidden_states.py").read_text() == render_glue()

    removed, added = _removed_and_added(result.patch, model_path)
    # Only the PP guards and the bare handoff return go; everything else stays byte-equal.
    allowed = (
        "world_size > 1",
        "NotImplementedError",
        "is_last_rank",
        "return",
        "return PPProxyTensors(",
        "{",
        "}",
        ")",
        '"hidden_states"',
        "'hidden_states'",
        '"residual"',
        "'residual'",
    )
    for line in removed:
        assert any(token in line for token in allowed), line
    assert "NotImplementedError" not in new
    assert all(len(line) <= 88 for line in added), [ln for ln in added if len(ln) > 88]
    # Lines of the original all survive, in order, except the removed ones.
    kept = [ln for ln in original.splitlines() if ln not in removed]
    remaining = iter(new.splitlines())
    assert all(any(line == other for other in remaining) for line in kept)

    again = generate(root)
    assert again.model("kimi_linear").status == kimi.PATCHED and again.patch == ""


def test_checkout_layout_paths(tmp_path):
    root, model_path = _tree(tmp_path, "kimi_renamed.py", layout="checkout")
    result = generate(root)
    assert result.changed == [model_path, "python/sglang/srt/layers/aux_hidden_states.py"]
    assert (
        "diff --git a/python/sglang/srt/layers/aux_hidden_states.py "
        "b/python/sglang/srt/layers/aux_hidden_states.py\nnew file mode 100644\n"
    ) in result.patch
    assert git_apply(root, result.patch).returncode == 0


def test_rewriter_keeps_local_names_and_capture_expression():
    source = (FIXTURES / "kimi_renamed.py").read_text()
    new, analysis = kimi.rewrite(source, "kimi_renamed.py")
    assert analysis.setter.inner == "self.backbone" and analysis.setter.pp == "self.pipeline"
    assert analysis.forward.loop_var == "layer_idx" and analysis.forward.aux_name == "captured"
    assert "dspark_captures[layer_idx] = captured[-1]" in new
    assert "captured.append(hs + res)" in new
    assert "captured = self.pp_aux_relay.collect(dspark_captures, dspark_incoming)" in new
    assert "None if intermediate is None else intermediate.tensors" in new
    assert (
        "set_pp_aux_capture(\n"
        "            self.backbone,\n"
        "            self.pipeline,\n"
        '            ids_attr="dspark_layers_to_capture",\n'
        "            hidden_size=self.config.hidden_size,\n"
        "        )"
    ) in new
    assert "self.pp_aux_relay: PPAuxRelay | None = None" in new


def test_generated_model_code_names_no_transport_mode():
    source = (FIXTURES / "kimi_extra_code.py").read_text()
    new, _ = kimi.rewrite(source, "x.py")
    cst.parse_module(new)
    for literal in (
        '"relay"',
        '"direct"',
        "mode=",
        "device_group",
        "AuxCapturePlan",
        "SGLANG_PP_AUX_TRANSPORT",
    ):
        assert literal not in new, literal
    assert "from sglang.srt.layers.aux_hidden_states import" in new
    assert "set_pp_aux_capture" in new


def test_a_tree_patched_by_the_earlier_form_is_reported_patched():
    """Earlier versions wrote the transport onto ``dspark_aux_transport`` themselves."""
    source = (FIXTURES / "kimi_extra_code.py").read_text()
    new, _ = kimi.rewrite(source, "x.py")
    legacy = re.sub(
        r"set_pp_aux_capture\(\n.*?\n        \)",
        "self.model.dspark_aux_transport = aux_transport",
        new,
        flags=re.S,
    )
    legacy = legacy.replace("self.pp_aux_relay", "self.dspark_aux_transport").replace(
        "from sglang.srt.layers.aux_hidden_states import PPAuxRelay, set_pp_aux_capture\n",
        "from sglang.srt.distributed.pp_aux_transport import PPAuxTransport\n",
    )
    assert "set_pp_aux_capture" not in legacy and "pp_aux_capture" not in legacy
    assert kimi.analyse(legacy, "x.py").status == kimi.PATCHED
    # Without the transport in the setter it is not patched.
    bare = legacy.replace("self.model.dspark_aux_transport = aux_transport", "pass")
    assert kimi.analyse(bare, "x.py").status != kimi.PATCHED


def test_extra_code_fixture_leaves_eagle3_path_alone():
    source = (FIXTURES / "kimi_extra_code.py").read_text()
    new, _ = kimi.rewrite(source, "x.py")
    eagle = source[
        source.index("    def set_eagle3_layers_to_capture") : source.index(
            "    def set_dspark_layers_to_capture"
        )
    ]
    assert eagle in new
    assert "eagle_aux.append(hidden_states + (residual if residual is not None else 0))" in new
    # The comment above the old handoff return is kept above the new handoff.
    assert (
        "# Only the residual stream crosses the stage boundary.\n"
        "            proxy_tensors = {" in new
    )


def test_supported_shape_is_reported_and_nothing_written(tmp_path):
    root, _ = _tree(tmp_path, "kimi_supported.py")
    result = generate(root)
    assert (
        result.model("kimi_linear").status == kimi.SUPPORTED
        and result.changes == []
        and result.patch == ""
    )
    out = tmp_path / "out.patch"
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root), "-o", str(out)])
    assert outcome.exit_code == 0
    assert "already supports DSPARK aux capture under PP" in outcome.output
    assert "dspark_aux" in outcome.output
    assert out.read_text() == ""


def test_unrecognised_shape_exits_2_naming_file_and_what_was_looked_for(tmp_path):
    root, model_path = _tree(tmp_path, "kimi_unrecognised.py")
    before = (root / model_path).read_bytes()
    out, body = tmp_path / "out.patch", tmp_path / "pr.md"
    outcome = CliRunner().invoke(
        cli, ["upstream-patch", str(root), "-o", str(out), "--pr-body", str(body)]
    )
    assert outcome.exit_code == 2
    assert str(root / model_path) in outcome.output
    assert "appends to an aux list" in outcome.output
    assert not out.exists() and not body.exists()
    assert (root / model_path).read_bytes() == before


def test_missing_model_file_and_non_tree_exit_2(tmp_path):
    root, model_path = _tree(tmp_path, "kimi_renamed.py")
    (root / model_path).unlink()
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(root)])
    assert outcome.exit_code == 2
    assert "no model file defines a capture hook, so there is nothing to patch" in outcome.output
    outcome = CliRunner().invoke(cli, ["upstream-patch", str(tmp_path / "nowhere")])
    assert outcome.exit_code == 2


def test_cli_stdout_then_empty_patch_after_apply(tmp_path):
    root, _ = _tree(tmp_path, "kimi_reformatted.py")
    first = CliRunner().invoke(cli, ["upstream-patch", str(root)])
    assert first.exit_code == 0
    patch = first.stdout
    assert patch.startswith("diff --git a/sglang/srt/models/kimi_linear.py")
    assert git_apply(root, patch).returncode == 0
    out = tmp_path / "again.patch"
    second = CliRunner().invoke(cli, ["upstream-patch", str(root), "-o", str(out)])
    assert second.exit_code == 0
    assert "already patched; the patch is empty" in second.output
    assert out.read_text() == ""


def test_pr_body_cites_the_error_in_sglangs_template(tmp_path):
    root, _ = _tree(tmp_path, "kimi_renamed.py")
    body = tmp_path / "pr.md"
    outcome = CliRunner().invoke(
        cli, ["upstream-patch", str(root), "-o", str(tmp_path / "p.patch"), "--pr-body", str(body)]
    )
    assert outcome.exit_code == 0, outcome.output
    text = body.read_text()
    assert text.splitlines()[0].startswith("# ")
    for needle in (
        "## Motivation",
        "## Modifications",
        "## Accuracy Tests",
        "## Benchmarking and Profiling",
        "## Checklist",
        'NotImplementedError("DSPARK aux hidden capture requires PP=1.")',
        "sglang/srt/layers/aux_hidden_states.py",
    ):
        assert needle in text, needle
    for stale in ("direct", "SGLANG_PP_AUX_TRANSPORT", "pp_aux_transport"):
        assert stale not in text, stale


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("fixture", PATCHABLE)
def test_patched_fixture_matches_pp1_across_processes(tmp_path, fixture):
    root, _ = _tree(tmp_path, fixture)
    unpatched = _drive(root, [{"pp": 2}])
    assert "NotImplementedError" in unpatched["runs"][0]["error"]
    assert git_apply(root, generate(root).patch).returncode == 0
    report = _drive(root, [{"pp": 2}, {"pp": 3}])
    for run in report["runs"]:
        assert run.get("error") is None, run.get("error")
        assert run["ok"] and run["aux_counts"] == [4, 4, 4], run


def _drive(root: Path, runs: list[dict]) -> dict:
    config = {
        "model": "kimi_linear",
        "num_layers": 7,
        "hidden_size": 4,
        "layer_ids": [6, 0, 3, 2],
        "tokens": [3, 0, 2],
        "construct": True,
        "runs": runs,
        "timeout": 90,
    }
    proc = run_python(["-m", "sglang_support.stage_check", json.dumps(config)], root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
