"""The scan and migrate commands: output, exit codes, files left untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from caller_cases import DEMO_REPO, ROOT
from click.testing import CliRunner

from codemods.callers.transform import TransformOptions, transform_source
from codemods.cli.commands import cli
from codemods.output.report import SCAN_JSON_SCHEMA


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture
def demo(tmp_path) -> Path:
    copy = tmp_path / "demo_repo"
    shutil.copytree(DEMO_REPO, copy)
    return copy


def test_check_write_check_cycle_on_the_demo(demo):
    original = snapshot(demo)
    result = invoke("migrate", "--check", str(demo))
    assert result.exit_code == 1, result.output
    assert "would change:" in result.stderr and "train_distill.py" in result.stderr
    assert snapshot(demo) == original

    result = invoke("migrate", "--write", str(demo))
    assert result.exit_code == 0, result.output
    written = snapshot(demo)
    changed = {name for name in original if written[name] != original[name]}
    assert changed == {"train_distill.py", "serving/capture_runner.py", "utils/capture.py"}
    assert "if args.capture_layers:" in written["train_distill.py"].decode()

    result = invoke("migrate", "--check", str(demo))
    assert result.exit_code == 0, result.output
    result = invoke("migrate", "--write", str(demo))
    assert result.exit_code == 0
    assert snapshot(demo) == written
    # The file left for a person is still reported, and still untouched.
    assert "review:" in result.stderr and "eval_features.py" in result.stderr
    assert written["eval_features.py"] == original["eval_features.py"]


def test_diff_is_the_default_and_changes_nothing(demo):
    original = snapshot(demo)
    result = invoke("migrate", str(demo))
    assert result.exit_code == 0
    assert snapshot(demo) == original
    assert "--- a/" in result.stdout and "+++ b/" in result.stdout
    assert "+    if args.capture_layers:" in result.stdout
    assert "-    model.set_dspark_layers_to_capture(args.capture_layers)" in result.stdout
    assert "eval_features.py" not in result.stdout  # review only, no diff
    assert (
        "7 file(s) scanned, 6 call sites in 4 files, 3 to change, 1 left for review, 0 failed"
        in result.stderr
    )


def test_diff_applies_with_patch(demo, tmp_path):
    if shutil.which("patch") is None:
        pytest.skip("patch(1) is not installed")
    diff = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "--diff", "demo_repo"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        env=_env(),
    ).stdout
    subprocess.run(["patch", "-p1", "-s"], input=diff, cwd=tmp_path, check=True)
    after_patch = snapshot(demo)
    invoke("migrate", "--write", str(demo))
    assert snapshot(demo) == after_patch


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_policies_reach_the_codemods(demo):
    result = invoke("migrate", "--guard-policy", "raise", "--fallback-policy", "raise", str(demo))
    assert result.exit_code == 0
    assert "+        raise ValueError(" in result.stdout
    assert "--pp-size 1" in result.stdout
    assert "logger.warning" not in result.stdout


def test_scan_text(demo):
    result = invoke("scan", str(demo))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 6
    assert any(
        line.endswith(
            "train_distill.py:27:5: set_dspark_layers_to_capture [direct] "
            "ids=args.capture_layers risk=maybe-none,pp-unsupported,pp-silent action=guard,fallback"
        )
        for line in lines
    )
    assert "3 to change, 1 left for review" in result.stderr


@pytest.mark.parametrize("output_format", ["text", "json"])
def test_scan_names_a_failed_file_once_on_stderr(tmp_path, output_format):
    bad = tmp_path / "broken.py"
    bad.write_text("model.set_dspark_layers_to_capture(ids\n")
    result = invoke("scan", "--format", output_format, str(bad))
    assert result.exit_code == 2
    everything = result.stdout + result.stderr
    assert everything.count(str(bad)) == 1 + (output_format == "json"), everything
    assert f"auxcap: error: {bad}: syntax error at line" in result.stderr
    if output_format == "json":
        [entry] = json.loads(result.stdout)["files"]
        assert entry["path"] == str(bad) and entry["error"].startswith("syntax error")
    else:
        assert result.stdout == ""


def test_scan_json_follows_the_schema(demo):
    result = invoke("scan", "--format", "json", str(demo))
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(SCAN_JSON_SCHEMA)
    jsonschema.validate(document, SCAN_JSON_SCHEMA)
    assert document["summary"] == {
        "files": 7,
        "call_sites": 6,
        "changed": 3,
        "review": 1,
        "failed": 0,
    }
    shapes = {site["shape"] for f in document["files"] for site in f["call_sites"]}
    assert shapes == {"direct", "variable", "loop"}


def test_scan_json_schema_rejects_bad_documents():
    bad = {
        "version": 2,
        "files": [{"path": "x", "status": "weird", "error": None, "call_sites": []}],
        "summary": {"files": 1, "call_sites": 0, "changed": 0, "review": 0, "failed": 0},
    }
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCAN_JSON_SCHEMA)


def test_user_added_hook_option(tmp_path):
    source = tmp_path / "medusa.py"
    source.write_text("def f(m, args):\n    m.set_medusa_layers_to_capture(args.heads)\n")
    assert invoke("scan", str(source)).stdout == ""
    result = invoke("scan", "--hook", "set_medusa_layers_to_capture", str(source))
    assert "set_medusa_layers_to_capture [direct]" in result.stdout
    result = invoke("migrate", "--check", "--hook", "set_medusa_layers_to_capture", str(source))
    assert result.exit_code == 1


@pytest.mark.parametrize(
    "args",
    [
        ["migrate", "does/not/exist"],
        ["migrate", "--check", "--write", "."],
        ["migrate"],
        ["migrate", "--guard-policy", "sometimes", "."],
        ["migrate", "--hook", "not a name", "."],
        ["scan", "--format", "xml", "."],
    ],
)
def test_usage_errors_exit_2(args):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2


def _broken_files(folder: Path) -> dict[str, bytes]:
    files = {
        "syntax.py": b"def f(model, ids=None)\n    model.set_dspark_layers_to_capture(ids)\n",
        "undecodable.py": b"def f(model):\n    model.set_dspark_layers_to_capture(None)  # \xff\xfe\n",
        "plain.py": b"def f(:\n    pass\n",
        "nohooks.py": b"import os\n\nprint(os.getcwd())\n",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


@pytest.mark.parametrize("mode", ["--diff", "--check", "--write"])
def test_unprocessable_files_exit_2_and_stay_untouched(tmp_path, mode):
    files = _broken_files(tmp_path)
    good = tmp_path / "good.py"
    good.write_text("def f(model, args):\n    model.set_dspark_layers_to_capture(args.ids)\n")
    result = invoke("migrate", mode, str(tmp_path))
    assert result.exit_code == 2
    assert f"{tmp_path / 'syntax.py'}: syntax error" in result.stderr
    assert f"{tmp_path / 'undecodable.py'}: cannot decode" in result.stderr
    assert "nohooks.py" not in result.stderr and "plain.py" not in result.stderr
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data
    assert ("if args.ids:" in good.read_text()) == (mode == "--write")
    assert "2 failed" in result.stderr


def test_scan_reports_unprocessable_files(tmp_path):
    _broken_files(tmp_path)
    result = invoke("scan", str(tmp_path))
    assert result.exit_code == 2
    assert f"auxcap: error: {tmp_path / 'syntax.py'}: syntax error" in result.stderr
    assert "syntax.py" not in result.stdout


def test_a_syntax_error_reads_file_line_column_and_python_words(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\ny = = 2\nmodel.set_dspark_layers_to_capture(x)\n")
    result = invoke("migrate", str(bad))
    assert result.exit_code == 2
    (line,) = [line for line in result.stderr.splitlines() if "bad.py" in line]
    assert line == f"auxcap: error: {bad}: syntax error at line 2, column 5: invalid syntax"


def test_the_pp_risk_line_counts_only_the_sites_migrate_changes(tmp_path):
    call = "def f(model, ids=None):\n    model.set_dspark_layers_to_capture(ids)\n"
    (tmp_path / "serve.py").write_text(call)
    (tmp_path / "test_serve.py").write_text(call)  # a test module: left alone
    (tmp_path / "other.py").write_text("import vllm\n\n" + call)  # another engine's module
    migrated = transform_source(call.encode(), "done.py", TransformOptions()).rewritten
    assert migrated is not None
    (tmp_path / "done.py").write_bytes(migrated)  # migrated already: nothing left to change
    scan = invoke("scan", str(tmp_path))
    assert scan.exit_code == 0, scan.output
    assert scan.stdout.count("pp-silent") == 4
    assert "1 to change" in scan.stderr
    assert "risk: 1 call site may lose their captures silently" in scan.stderr


def test_python_m_codemods_entry_point(demo):
    completed = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "--check", str(demo)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=ROOT,
        timeout=120,
    )
    assert completed.returncode == 1, completed.stderr
    assert "would change" in completed.stderr
