"""The caller codemods run under LibCST's own codemod CLI.

Working invocation (documented in ``docs/integrations.md``)::

    python -m libcst.tool codemod -x --no-format codemods.callers.rewrite.guard.GuardCommand PATH
    python -m libcst.tool codemod -x --no-format codemods.callers.rewrite.fallback.FallbackCommand PATH

``-x`` takes the command as ``module.Class``; ``--no-format`` keeps LibCST from piping the
result through a formatter (its default configuration runs ``black``).  The codemod's own
options (``--guard-policy``, ``--fallback-policy``, ``--hook``) follow the command name.
Run one after the other, they give exactly what ``auxcap migrate --write`` gives.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from caller_cases import CALLERS
from readme_blocks import commands

from codemods.callers.options import FALLBACK_POLICIES, GUARD_POLICIES
from codemods.callers.rewrite import fallback, guard
from codemods.callers.rewrite.fallback import FallbackCommand
from codemods.callers.rewrite.guard import GuardCommand

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "guard": "codemods.callers.rewrite.guard.GuardCommand",
    "fallback": "codemods.callers.rewrite.fallback.FallbackCommand",
}

pytestmark = pytest.mark.timeout(240)


def _libcst_tool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "libcst.tool", "codemod", "-x", "--no-format"]
    command += ["--hide-progress", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=200)


def _run_both(target: str, cwd: Path, policy_args: dict[str, list[str]], jobs: int = 1) -> None:
    for name in ("guard", "fallback"):
        result = _libcst_tool(f"--jobs={jobs}", COMMANDS[name], *policy_args[name], target, cwd=cwd)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Failed to codemod 0 files" in result.stderr, result.stderr


def test_description_and_options_come_from_the_metadata():
    assert GuardCommand.DESCRIPTION == guard.METADATA.libcst_description
    assert FallbackCommand.DESCRIPTION == fallback.METADATA.libcst_description
    assert guard.METADATA.id in GuardCommand.DESCRIPTION
    assert guard.METADATA.policy.names == GUARD_POLICIES
    assert fallback.METADATA.policy.names == FALLBACK_POLICIES
    for command, metadata in ((GuardCommand, guard.METADATA), (FallbackCommand, fallback.METADATA)):
        parser = argparse.ArgumentParser()
        command.add_args(parser)
        defaults = parser.parse_args([])
        assert getattr(defaults, metadata.policy.dest) == metadata.policy.default
        assert defaults.extra_hooks == []
        for choice in metadata.policy.names:
            parsed = parser.parse_args([metadata.policy.flag, choice, "--hook", "set_x"])
            assert getattr(parsed, metadata.policy.dest) == choice
            assert parsed.extra_hooks == ["set_x"]
        with pytest.raises(SystemExit):
            parser.parse_args([metadata.policy.flag, "bogus"])


def test_libcst_tool_help_shows_the_description_and_options(tmp_path):
    result = _libcst_tool(COMMANDS["guard"], "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "--guard-policy {skip,raise}" in text
    assert " ".join(guard.METADATA.summary.split()) in text


@pytest.mark.parametrize(
    "case, policy",
    [("args_attribute", "default"), ("args_attribute", "raise"), ("custom_hook", "default")],
)
def test_libcst_tool_gives_the_expected_after_file(tmp_path, case, policy):
    folder = CALLERS / case
    target = tmp_path / "module.py"
    shutil.copyfile(folder / "before.py", target)
    extra: list[str] = []
    options = folder / "options.json"
    if options.exists():
        for name in json.loads(options.read_text())["extra_hooks"]:
            extra += ["--hook", name]
    policy_args = {
        "guard": (["--guard-policy", "raise"] if policy == "raise" else []) + extra,
        "fallback": (["--fallback-policy", "raise"] if policy == "raise" else []) + extra,
    }
    expected = folder / ("after_raise.py" if policy == "raise" else "after.py")
    assert target.read_bytes() != expected.read_bytes()
    _run_both(str(target), tmp_path, policy_args)
    assert target.read_bytes() == expected.read_bytes()


def test_libcst_tool_on_a_directory_in_parallel(tmp_path):
    cases = ["getattr_variable", "receiver_chain", "literal_ids"]
    tree = tmp_path / "tree"
    for case in cases:
        (tree / case).mkdir(parents=True)
        shutil.copyfile(CALLERS / case / "before.py", tree / case / "module.py")
    _run_both("tree", tmp_path, {"guard": [], "fallback": []}, jobs=2)
    for case in cases:
        expected = (CALLERS / case / "after.py").read_bytes()
        assert (tree / case / "module.py").read_bytes() == expected, case


def test_readme_libcst_commands_run_as_written(tmp_path):
    """The two command lines of "Use with LibCST", on the folder they name, give ``migrate --write``'s
    output."""
    lines = commands("Use with LibCST")
    assert len(lines) == 2 and all(line.endswith(" fixtures/demo_repo/") for line in lines)
    folder = tmp_path / "fixtures" / "demo_repo"
    folder.mkdir(parents=True)
    shutil.copyfile(CALLERS / "args_attribute" / "before.py", folder / "train.py")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for line in lines:
        words = line.split()
        assert words[:3] == ["python", "-m", "libcst.tool"]
        result = subprocess.run(
            [sys.executable, *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=200,
        )
        assert result.returncode == 0, result.stderr
    expected = (CALLERS / "args_attribute" / "after.py").read_bytes()
    assert (folder / "train.py").read_bytes() == expected


def test_transformer_policy_by_position_by_option_name_or_default():
    from codemods.callers.rewrite.fallback import FallbackTransformer
    from codemods.callers.rewrite.guard import GuardTransformer

    assert GuardTransformer("m.py").policy == "skip"
    assert FallbackTransformer("m.py").policy == "warn"
    assert GuardTransformer("m.py", "raise").policy == "raise"
    assert FallbackTransformer("m.py", fallback_policy="raise").policy == "raise"
    assert GuardTransformer.POLICY_LABEL == "guard policy"
    with pytest.raises(TypeError, match="fallback_policy"):
        GuardTransformer("m.py", fallback_policy="raise")
    with pytest.raises(TypeError, match="twice"):
        GuardTransformer("m.py", "skip", guard_policy="raise")
    with pytest.raises(ValueError, match="unknown guard policy 'maybe'"):
        GuardTransformer("m.py", guard_policy="maybe")
