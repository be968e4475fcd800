"""Parallel runs print exactly what sequential runs print; progress only on a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.callers import engine
from codemods.cli.commands import cli
from codemods.cli.progress import Progress

ROOT = Path(__file__).resolve().parents[2]

CALLER = """\
import logging

logger = logging.getLogger(__name__)


def enable_{index}(model, args):
    model.set_dspark_layers_to_capture(args.layers_{index})


def unrelated_{index}(values):
    return [value * 2 for value in values]
"""


def _tree(root: Path, count: int = 12) -> Path:
    for index in range(count):
        package = root / f"pkg{index % 3}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"caller_{index:02d}.py").write_text(CALLER.format(index=index))
        (package / f"plain_{index:02d}.py").write_text(f"VALUE_{index} = {index}\n")
    (root / "pkg0" / "broken.py").write_text(
        "def f(m, ids):\n    m.set_dspark_layers_to_capture(ids\n"
    )
    return root


class _PoolSpy:
    def __init__(self, monkeypatch):
        self.calls = []
        original = engine._in_workers

        def spy(task, paths, jobs):
            self.calls.append((len(paths), jobs))
            return original(task, paths, jobs)

        monkeypatch.setattr(engine, "_in_workers", spy)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("command", [["migrate", "--diff"], ["scan"], ["scan", "--format", "json"]])
def test_jobs_two_prints_exactly_what_jobs_one_prints(tmp_path, monkeypatch, command):
    tree = _tree(tmp_path)
    monkeypatch.setattr(engine, "POOL_MIN_FILES", 2)
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 1)
    monkeypatch.setattr(engine, "CHUNK_MAX_FILES", 2)  # several chunks in flight
    spy = _PoolSpy(monkeypatch)
    runner = CliRunner()
    sequential = runner.invoke(cli, [*command, "--jobs", "1", str(tree)])
    assert spy.calls == []
    parallel = runner.invoke(cli, [*command, "--jobs", "2", str(tree)])
    assert spy.calls == [(13, 2)]  # the pool really ran, over the 13 candidates
    assert sequential.exit_code == parallel.exit_code == 2  # broken.py cannot be parsed
    assert parallel.stdout == sequential.stdout
    assert parallel.stderr == sequential.stderr
    assert "broken.py" in parallel.stderr
    assert parallel.stdout.count("set_dspark_layers_to_capture") >= 12


def test_small_runs_stay_in_one_process(tmp_path, monkeypatch):
    tree = _tree(tmp_path, count=2)
    spy = _PoolSpy(monkeypatch)
    result = CliRunner().invoke(cli, ["scan", "--jobs", "4", str(tree)])
    assert result.exit_code == 2
    assert spy.calls == []  # three small candidates: not worth a pool
    assert engine.uses_workers(40, 2_000_000, 4)
    assert not engine.uses_workers(40, 2_000_000, 1)
    assert not engine.uses_workers(2, 2_000_000, 4)


def test_parallel_results_come_in_sorted_order(tmp_path, monkeypatch):
    tree = _tree(tmp_path, count=6)
    monkeypatch.setattr(engine, "POOL_MIN_FILES", 2)
    monkeypatch.setattr(engine, "POOL_MIN_BYTES", 1)
    monkeypatch.setattr(engine, "CHUNK_MAX_FILES", 1)
    monkeypatch.setattr(engine, "WINDOW_PER_JOB", 1)
    from codemods.callers.options import TransformOptions

    stream = engine.run([tree], TransformOptions(), execution=engine.Execution(jobs=2))
    first = next(stream)
    assert first.path.endswith("broken.py")
    rest = list(stream)
    assert [r.path for r in [first, *rest]] == sorted(
        [first.path] + [r.path for r in rest], key=lambda p: p.split("/")
    )


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_draws_on_a_terminal_only():
    terminal = _Terminal()
    bar = Progress(4, stream=terminal, delay=0, interval=0)
    for _ in range(4):
        bar.advance()
    bar.close()
    assert "4/4 files" in terminal.getvalue() and "\r" in terminal.getvalue()
    piped = io.StringIO()
    bar = Progress(4, stream=piped, delay=0, interval=0)
    for _ in range(4):
        bar.advance()
    bar.close()
    assert piped.getvalue() == ""


def test_progress_waits_before_drawing():
    terminal = _Terminal()
    bar = Progress(4, stream=terminal, delay=60)
    bar.advance()
    bar.close()
    assert terminal.getvalue() == ""


def test_cli_progress_only_for_text_output(tmp_path, monkeypatch):
    tree = _tree(tmp_path, count=2)
    seen = []
    original = engine.Progress

    def spy(total, **kwargs):
        seen.append(kwargs.get("enabled"))
        return original(total, **kwargs)

    monkeypatch.setattr(engine, "Progress", spy)
    runner = CliRunner()
    runner.invoke(cli, ["scan", "--format", "json", str(tree)])
    runner.invoke(cli, ["scan", str(tree)])
    runner.invoke(cli, ["migrate", "--diff", str(tree)])
    assert seen == [False, True, True]


def test_no_progress_bar_in_a_pipe(tmp_path):
    tree = _tree(tmp_path, count=3)
    done = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "--diff", "--no-prefilter", str(tree)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert "\r" not in done.stderr and "\x1b[" not in done.stderr and "[#" not in done.stderr
    assert "file(s) scanned" in done.stderr


def test_version_does_not_load_libcst():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom codemods.cli.commands import main\nsys.argv = ['auxcap', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('libcst' in sys.modules)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.splitlines() == ["auxcap, version 0.1.0", "False"]


def test_a_tree_without_hooks_never_loads_libcst(tmp_path):
    (tmp_path / "plain.py").write_text("import os\n")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom codemods.cli.commands import main\n"
            f"sys.argv = ['auxcap', 'migrate', '--diff', {str(tmp_path)!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('libcst' in sys.modules)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.splitlines()[-1] == "False"


def test_nonexistent_path_is_reported_and_the_rest_still_scanned(tmp_path):
    (tmp_path / "present.py").write_text("model.set_dspark_layers_to_capture(args.ids)\n")
    result = CliRunner().invoke(cli, ["scan", str(tmp_path / "missing"), str(tmp_path)])
    assert result.exit_code == 2
    assert f"{tmp_path / 'missing'}: cannot read: no such file" in result.stderr
    assert "present.py" in result.stdout
