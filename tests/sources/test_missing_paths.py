"""A path that does not exist: named once, exit 2, and not counted as a scanned file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli

SOURCE = "def f(model, args):\n    model.set_dspark_layers_to_capture(args.ids)\n"


def invoke(*args):
    return CliRunner().invoke(cli, [str(arg) for arg in args])


@pytest.mark.parametrize("command", [["scan"], ["migrate"], ["migrate", "--check"]])
def test_missing_path_alone(tmp_path, command):
    missing = tmp_path / "nope"
    result = invoke(*command, missing)
    assert result.exit_code == 2
    mentions = [line for line in result.output.splitlines() if str(missing) in line]
    assert mentions == [f"auxcap: error: {missing}: cannot read: no such file or directory"]
    assert str(missing) not in result.stdout
    assert "0 file(s) scanned" in result.stderr and "1 path(s) not found" in result.stderr


def test_missing_path_beside_real_files_is_not_a_scanned_file(tmp_path):
    (tmp_path / "present.py").write_text(SOURCE)
    missing = tmp_path / "missing.py"
    result = invoke("scan", missing, tmp_path)
    assert result.exit_code == 2
    assert result.output.count(str(missing)) == 1
    assert "present.py:2:5: set_dspark_layers_to_capture" in result.stdout
    assert "1 file(s) scanned, 1 call site in 1 file" in result.stderr
    assert "0 failed, 1 path(s) not found" in result.stderr


def test_missing_path_with_json_output(tmp_path):
    (tmp_path / "present.py").write_text(SOURCE)
    result = invoke("scan", "--format", "json", tmp_path / "missing.py", tmp_path)
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["summary"]["files"] == 1
    assert [entry["path"] for entry in document["files"]] == [str(tmp_path / "present.py")]
    assert result.stderr.count("missing.py") == 1


def test_missing_path_leaves_the_other_files_written(tmp_path):
    (tmp_path / "present.py").write_text(SOURCE)
    result = invoke("migrate", "--write", tmp_path / "missing.py", tmp_path)
    assert result.exit_code == 2
    assert "if args.ids:" in (tmp_path / "present.py").read_text()
    assert "1 changed" in result.stderr and "1 path(s) not found" in result.stderr
