"""Command-line conventions shared with ruff/black: ``--version``, ``--exit-zero``,
``--include``/``--exclude``/``--force-exclude``, colour only on a terminal (``NO_COLOR``),
and ``--help`` built from the codemods' metadata."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner
from readme_blocks import commands

from codemods import __version__
from codemods.callers.rewrite.registry import CODEMODS
from codemods.cli.commands import cli

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
UNGUARDED = textwrap.dedent("""\
    def enable_capture(model, args):
        model.set_dspark_layers_to_capture(args.capture_layers)
    """)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture()
def project(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(UNGUARDED)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), **kwargs)


# ------------------------------------------------------------------------- version / help


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_matches_the_package(flag):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    result = _invoke(flag)
    assert result.exit_code == 0
    assert result.stdout == f"auxcap, version {version}\n"
    assert __version__ == version


def test_migrate_help_lists_codemods_and_policies_from_metadata():
    result = _invoke("migrate", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for metadata in CODEMODS:
        assert metadata.id in text
        assert " ".join(metadata.summary.split()) in text
        assert " ".join(metadata.policy.help.split()) in text
    for option in (
        "--exit-zero",
        "--format [text|json]",
        "--include",
        "--exclude",
        "--force-exclude",
    ):
        assert option in text


# ------------------------------------------------------------------------------ exit-zero


def test_check_exits_1_and_exit_zero_exits_0(project):
    assert _invoke("migrate", "--check", "train.py").exit_code == 1
    result = _invoke("migrate", "--check", "--exit-zero", "train.py")
    assert result.exit_code == 0
    assert "would change: train.py" in result.stderr
    assert (project / "train.py").read_text() == UNGUARDED


def test_exit_zero_still_reports_errors_with_2(project):
    (project / "broken.py").write_text("model.set_dspark_layers_to_capture(args.ids\n")
    result = _invoke("migrate", "--check", "--exit-zero", ".")
    assert result.exit_code == 2
    assert "broken.py" in result.stderr


def test_exit_zero_with_json_report(project):
    result = _invoke("migrate", "--check", "--exit-zero", "--format", "json", "train.py")
    assert result.exit_code == 0
    assert '"changeset"' in result.stdout and "train.py" in result.stdout


# --------------------------------------------------------------------------------- colour


def _run_on_pty(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Run ``python -m codemods ARGS`` with stdout and stderr on a pseudo-terminal."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "codemods", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 60)
            if not ready:
                break
            try:
                data = os.read(leader, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        process.wait(timeout=60)
    return b"".join(chunks).decode()


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def test_diff_is_coloured_on_a_terminal(project):
    output = _run_on_pty(["migrate", "train.py"], project, _env())
    assert "\x1b[32m+    if args.capture_layers:" in output, output
    assert "\x1b[31m-    model.set_dspark_layers_to_capture(args.capture_layers)" in output


def test_no_color_turns_colour_off_on_a_terminal(project):
    output = _run_on_pty(["migrate", "train.py"], project, _env(NO_COLOR="1"))
    assert "+    if args.capture_layers:" in output, output
    assert not ANSI.search(output), output


def test_no_colour_when_piped(project):
    result = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "train.py"],
        cwd=project,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "+    if args.capture_layers:" in result.stdout
    assert not ANSI.search(result.stdout + result.stderr)


# ---------------------------------------------------------------- include / exclude / force


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    for name in ("src/train.py", "src/gen_capture.py", "legacy/old.py"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(UNGUARDED)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _would_change(result) -> set[str]:
    return {
        line.removeprefix("would change: ").replace(os.sep, "/")
        for line in result.stderr.splitlines()
        if line.startswith("would change: ")
    }


def test_exclude_and_include_globs_select_files_under_a_directory(tree):
    result = _invoke("migrate", "--check", "--exclude", "gen_*.py", "--exclude", "legacy/", ".")
    assert _would_change(result) == {"src/train.py"}
    result = _invoke("migrate", "--check", "--include", "legacy/**", ".")
    assert _would_change(result) == {"legacy/old.py"}


def test_explicit_files_ignore_exclude_unless_force_exclude(tree):
    files = ["src/train.py", "legacy/old.py"]
    result = _invoke("migrate", "--check", "--exclude", "legacy/", *files)
    assert result.exit_code == 1
    assert _would_change(result) == set(files)
    result = _invoke("migrate", "--check", "--exclude", "legacy/", "--force-exclude", *files)
    assert result.exit_code == 1
    assert _would_change(result) == {"src/train.py"}
    result = _invoke("migrate", "--check", "--exclude", "legacy/", "--force-exclude", files[1])
    assert result.exit_code == 0, result.stderr
    assert _would_change(result) == set()


def test_hooks_entry_forces_excludes():
    import yaml

    for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text()):
        assert "--force-exclude" in hook["entry"].split(), hook["id"]


def test_readme_ci_commands_run_as_written(project):
    """The CI lines of "Use in CI" (``docs/integrations.md``): the check fails the job, the report never does and validates."""
    import json

    import jsonschema

    lines = commands("Use in CI")
    assert [line.split()[:3] for line in lines] == [["auxcap", "migrate", "--check"]] * 2
    env = _env()
    shell = f'auxcap() {{ "{sys.executable}" -m codemods "$@"; }}\n'
    check = subprocess.run(["bash", "-c", shell + lines[0]], cwd=project, env=env, timeout=60)
    assert check.returncode == 1
    report = subprocess.run(["bash", "-c", shell + lines[1]], cwd=project, env=env, timeout=60)
    assert report.returncode == 0
    schema = json.loads((ROOT / "docs" / "report-schema.json").read_text())
    document = json.loads((project / "auxcap-report.json").read_text())
    jsonschema.validate(document, schema)
    assert document["results"][0]["changeset"][0]["path"] == "train.py"
