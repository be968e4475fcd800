"""What the reports say about each call site: the scan summary and its PP risk line, the
CodeTF ``unfixed[]`` entries, the ``--branch`` output and the PR description, for a project
mixing rewritten calls, capture-required calls, a test module and EAGLE3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from tests.gitrepo import IDENTITY, git, isolate_git

CAPTURE = """import logging

logger = logging.getLogger(__name__)


def configure(model, layer_ids=None):
    model.set_dspark_layers_to_capture(layer_ids)


def configure_default(model):
    model.set_eagle3_layers_to_capture(None)
"""
RUNNER = """class DraftModelRunner:
    def init_capture(self, model, target_layer_ids):
        if self.dflash_use_aux_hidden_state:
            model.set_dflash_layers_to_capture(target_layer_ids)
"""
TEST_MODULE = """def test_capture(model):
    model.set_dspark_layers_to_capture(None)
"""


def auxcap(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    root = tmp_path / "proj"
    (root / "app").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "app" / "capture.py").write_text(CAPTURE)
    (root / "app" / "runner.py").write_text(RUNNER)
    (root / "tests" / "test_capture.py").write_text(TEST_MODULE)
    (root / "app" / "plain.py").write_text("import os\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init", env=IDENTITY)
    monkeypatch.chdir(root)
    return root


def test_scan_summary_counts_files_and_points_at_the_upstream_patch(project):
    result = auxcap("scan", ".")
    assert result.exit_code == 0, result.output
    assert "4 file(s) scanned, 4 call sites in 3 files, 1 to change" in result.stderr
    risk = [line for line in result.stderr.splitlines() if line.startswith("risk: ")]
    assert len(risk) == 1
    # All four calls are at risk, but migrate changes only the DSPARK call of capture.py:
    # the EAGLE3 call (nothing to rewrite), the capture-required DFLASH call and the test
    # module's call are left alone, and the hint counts only what migrate would change.
    assert risk[0].startswith("risk: 1 call site may lose their captures silently")
    assert "auxcap upstream-patch" in risk[0]
    eagle3 = next(line for line in result.stdout.splitlines() if "eagle3" in line)
    assert "risk=pp-silent" in eagle3 and "action=none" in eagle3
    runner = next(line for line in result.stdout.splitlines() if "runner.py" in line)
    assert "capture required: the call runs under a speculative-decoding feature flag" in runner


def test_scan_json_lists_the_new_risk():
    from codemods.output.report import SCAN_JSON_SCHEMA

    risks = SCAN_JSON_SCHEMA["properties"]["files"]["items"]["properties"]["call_sites"]
    assert "pp-silent" in json.dumps(risks)


def test_codetf_unfixed_lists_sites_left_alone_with_the_reason(project):
    result = auxcap("migrate", "--format", "json", ".")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    unfixed = {entry["codemod"].rsplit("/", 1)[-1]: entry["unfixed"] for entry in report["results"]}
    guard = {
        (item["path"], item["lineNumber"]): item["reason"] for item in unfixed["guard-capture-ids"]
    }
    fallback = {
        (item["path"], item["lineNumber"]): item["reason"]
        for item in unfixed["fallback-pp-capture"]
    }
    assert "test module" in guard["tests/test_capture.py", 2]
    assert "capture required" in fallback["app/runner.py", 4]
    assert ("app/capture.py", 7) not in fallback  # rewritten: not unfixed
    assert "skipped: " in result.stderr


def test_branch_output_and_pr_body_say_what_was_and_was_not_rewritten(project):
    result = auxcap("migrate", ".", "--branch", "auxcap/capture", "--pr-body", "PR.md")
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert any("runner.py" in line and "capture required" in line for line in skipped)
    assert any("test_capture.py" in line and "test module" in line for line in skipped)
    body = (project / "PR.md").read_text()
    row = next(line for line in body.splitlines() if line.startswith("- `app/capture.py:7`: "))
    assert "`layer_ids` may be unset" in row and "NotImplementedError" in row
    assert "skipped" in row and "logs a warning" in row  # what the default policies did here
    section = body.split("### Not rewritten, and why", 1)[1].split("Re-check from", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(lines) == 3
    by_file = {line.split("`")[1].split(":")[0]: line for line in lines}
    assert "capture required" in by_file["app/runner.py"]
    assert "under pipeline parallelism its captures are lost silently" in by_file["app/capture.py"]
    assert "test module" in by_file["tests/test_capture.py"]
