"""``upstream-patch --validate`` never exits 0 when the validation could not run (torch
missing, the test not starting, nothing to validate), nor when a model failed it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.upstream.validation import run_tests as validate_run
from codemods.upstream.validation.run_tests import FAILED, VALIDATED, Validation
from tests.gitrepo import isolate_git
from tests.upstream.test_upstream_rerun import family_checkout


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    return family_checkout(tmp_path / "sglang")


def upstream(checkout: Path, tmp_path: Path, *extra: str):
    return CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(checkout),
            "-o",
            str(tmp_path / "p.patch"),
            "--pr-body",
            str(tmp_path / "PR.md"),
            "--validate",
            *extra,
        ],
        catch_exceptions=False,
    )


def test_without_torch_the_validation_cannot_run_and_the_exit_is_2(checkout, tmp_path, monkeypatch):
    """A real run of the family test, in a Python where ``import torch`` fails."""
    stubs = tmp_path / "no_torch"
    (stubs / "torch").mkdir(parents=True)
    (stubs / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(stubs))
    result = upstream(checkout, tmp_path)
    assert result.exit_code == 2, result.output
    assert "not validated: the family test did not run on 2 stages" in result.output
    assert "No module named 'torch'" in result.output
    assert "error: --validate could not run" in result.output
    # The patch and the PR description are still written, and claim nothing.
    assert (tmp_path / "p.patch").read_text().startswith("diff --git ")
    assert "(run by this invocation)" not in (tmp_path / "PR.md").read_text()


def test_a_test_that_cannot_be_started_exits_2(checkout, tmp_path, monkeypatch):
    def cannot_start(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "python")

    monkeypatch.setattr(validate_run.subprocess, "run", cannot_start)
    result = upstream(checkout, tmp_path)
    assert result.exit_code == 2, result.output
    assert "the family test could not be started" in result.output


@pytest.mark.parametrize(
    ("validation", "code"),
    [
        (Validation({"llama": VALIDATED}), 0),
        (Validation({"llama": VALIDATED, "qwen3": FAILED}), 1),
        (Validation(problem="the patch rewrites no model of the capture-hook family"), 2),
        (Validation(), 2),
    ],
)
def test_exit_code_of_each_outcome(checkout, tmp_path, monkeypatch, validation, code):
    monkeypatch.setattr(validate_run, "run_family", lambda result: validation)
    assert upstream(checkout, tmp_path).exit_code == code
    assert validation.exit_code == code


def test_series_with_branch_commits_nothing_when_the_validation_could_not_run(
    checkout, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        validate_run, "run_family", lambda result: Validation(problem="No module named 'torch'")
    )
    monkeypatch.chdir(checkout)
    result = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            ".",
            "--series",
            str(tmp_path / "series"),
            "--validate",
            "--branch",
            "pp/capture",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 2, result.output
    assert "nothing committed on branch pp/capture" in result.output
    branches = subprocess.run(
        ["git", "branch", "--list", "pp/capture"], cwd=checkout, capture_output=True, text=True
    ).stdout
    assert branches.strip() == ""
