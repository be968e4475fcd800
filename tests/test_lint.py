"""The project is clean under its own ruff configuration (``[tool.ruff]`` in
``pyproject.toml``: lint and format) and its type checker (``[tool.mypy]``), and that
configuration keeps the rule families it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_RULES = {"E4", "E7", "E9", "F", "I", "B", "UP"}
SOURCES = ("codemods", "tests", "scripts")


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_configuration_selects_the_required_rules():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    selected = set(config["tool"]["ruff"]["lint"]["select"])
    assert REQUIRED_RULES <= selected


def test_package_has_no_findings():
    result = _ruff("check", "--no-cache", "--output-format", "concise", *SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_code_is_formatted():
    result = _ruff("format", "--no-cache", "--check", *SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_formatter_reports_unformatted_code(tmp_path):
    """The check above can fail: the same configuration wants this file reformatted."""
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    config = ROOT / "pyproject.toml"
    result = _ruff("format", "--no-cache", "--check", "--config", str(config), str(bad))
    assert result.returncode == 1


def test_types_check():
    """``mypy`` with the project's configuration (files: ``codemods``) finds nothing."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", "/dev/null"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_ruff_reports_a_finding(tmp_path):
    """The check above can fail: the same configuration flags an unused import."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    config = ROOT / "pyproject.toml"
    result = _ruff("check", "--no-cache", "--config", str(config), str(bad))
    assert result.returncode == 1
    assert "F401" in result.stdout
