"""Test modules and another engine's modules: scan reports them, migrate leaves them alone.

``fixtures/scope/project`` holds an SGLang caller (``capture.py``), a test module
(``tests/test_capture_hooks.py``, one call inside ``pytest.raises``) and a tokenspeed backend
(imports ``tokenspeed``, passes ``capture_hc=``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from caller_cases import ROOT
from click.testing import CliRunner

from codemods.callers.records import SKIP_PREFIX, Action, Status
from codemods.callers.transform import TransformOptions, scan_source, transform_source
from codemods.cli.commands import cli

PROJECT = ROOT / "fixtures" / "scope" / "project"
EXPECTED = ROOT / "fixtures" / "scope" / "expected"
TEST_MODULE = Path("tests") / "test_capture_hooks.py"
ENGINE = Path("tokenspeed_backend.py")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def project(tmp_path) -> Path:
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy)
    return copy


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*.py")}


def test_scan_lists_every_site_with_the_reason(project):
    result = invoke("scan", str(project))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 5
    test_lines = [line for line in lines if "test_capture_hooks.py" in line]
    assert len(test_lines) == 3
    assert all("action=none (not rewritten: test module" in line for line in test_lines)
    (engine,) = [line for line in lines if "tokenspeed_backend.py" in line]
    assert "not SGLang: imports tokenspeed and not sglang" in engine
    (plain,) = [line for line in lines if "capture.py:" in line and "hooks" not in line]
    assert "action=guard,fallback" in plain


def test_scan_json_carries_the_reason(project):
    result = invoke("scan", "--format", "json", str(project))
    assert result.exit_code == 0, result.output
    notes = [
        site["note"] for entry in json.loads(result.stdout)["files"] for site in entry["call_sites"]
    ]
    assert sum(note.startswith(SKIP_PREFIX) for note in notes) == 4


def test_migrate_write_leaves_tests_and_other_engines_byte_identical(project):
    original = snapshot(project)
    result = invoke("migrate", "--write", str(project))
    assert result.exit_code == 0, result.output
    written = snapshot(project)
    assert {name for name in original if written[name] != original[name]} == {Path("capture.py")}
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == 4
    assert sum("test module (rewritten only with --include-tests)" in s for s in skipped) == 3
    assert sum("not SGLang: imports tokenspeed" in s for s in skipped) == 1


def test_check_on_tests_and_engine_only_needs_no_change(project):
    (project / "capture.py").unlink()
    result = invoke("migrate", "--check", str(project))
    assert result.exit_code == 0, result.output
    assert "would change" not in result.stderr


def test_include_tests_rewrites_the_test_module_but_not_the_raises_block(project):
    result = invoke("migrate", "--write", "--include-tests", str(project))
    assert result.exit_code == 0, result.output
    written = (project / TEST_MODULE).read_bytes()
    assert written == (EXPECTED / "test_capture_hooks.include_tests.py").read_bytes()
    assert (
        b'    with pytest.raises(ValueError, match="explicit layer_ids"):\n'
        b"        target.set_dspark_layers_to_capture(None)\n"
    ) in written
    assert (project / ENGINE).read_bytes() == (PROJECT / ENGINE).read_bytes()
    skipped = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(skipped) == 3
    assert any("pytest.raises" in line and "test_capture_hooks.py:20:" in line for line in skipped)
    assert any(
        "capture required" in line and "test_capture_hooks.py:14:" in line for line in skipped
    )


def test_library_calls_agree():
    source = (PROJECT / ENGINE).read_bytes()
    for transform in (scan_source, transform_source):
        result = transform(source, str(ENGINE))
        assert result.status is Status.UNCHANGED and result.rewritten is None
        assert [site.actions for site in result.call_sites] == [(Action.NONE,)]
    source = (PROJECT / TEST_MODULE).read_bytes()
    result = transform_source(source, str(TEST_MODULE), TransformOptions(include_tests=True))
    assert result.status is Status.CHANGED
    # The first test asserts the capture after the call: capture required, left alone.
    assert [site.actions != (Action.NONE,) for site in result.call_sites] == [False, False, True]


def test_keyword_another_engine_takes_is_enough(tmp_path):
    path = tmp_path / "backend.py"
    path.write_text("def enable(model, ids=None):\n"
                    "    model.set_dflash_layers_to_capture(ids, capture_hc=True)\n")  # fmt: skip
    result = invoke("migrate", "--write", str(path))
    assert result.exit_code == 0, result.output
    assert "capture_hc=...) is not a keyword of SGLang's setters" in result.stderr
    assert path.read_text().count("\n") == 2
