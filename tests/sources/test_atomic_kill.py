"""Atomic writes under SIGKILL: a killed ``migrate --write`` never leaves a partial file.

A real ``python -m codemods migrate --write`` process runs over a tree of a couple of hundred
files and is killed with SIGKILL (its whole process group, so parallel workers die too) at
several points: right after its first write, a little later, and -- deterministically -- at
the worst moment, when a temporary file is complete but not yet renamed over its target.
Afterwards every source file holds exactly its old bytes or exactly the bytes
``transform_source`` produces, temporary files never end in ``.py``, and the next run removes
the temporary files left behind and finishes the migration.

Without the temporary-file-and-rename protocol (writing the target in place), the paused
process would leave a truncated or half-written target; the checks on every file's bytes
would catch that.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codemods.callers.transform import TransformOptions, transform_source
from codemods.sources import fileio

ROOT = Path(__file__).resolve().parents[2]
FOLDERS, FILES_PER_FOLDER = 10, 20

VARIANTS = [
    "import os\n\n\ndef main(model, args):\n    os.getcwd()\n"
    "    model.set_dspark_layers_to_capture(args.capture_layers)\n",
    "import logging\n\nlogger = logging.getLogger(__name__)\n\n\n"
    "class Runner:\n    def setup(self, model, cfg):\n"
    "        model.set_msd_layers_to_capture(cfg.aux_layers)\n",
    "def enable(model):\n    model.set_eagle3_layers_to_capture([2, 4])\n" + "# pad\n" * 400,
    "x = 1\n",  # no hook: stays as it is
]

#: Runs the CLI, but stops forever right before the N-th rename (the worst moment to die).
PAUSING_CLI = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from codemods.sources import fileio
flag, stop_at = sys.argv[1], int(sys.argv[2])
seen = []
def pause(snapshot, temp_path):
    seen.append(temp_path)
    if len(seen) == stop_at:
        with open(flag + ".tmp", "w") as out:
            out.write(temp_path)
        os.rename(flag + ".tmp", flag)
        time.sleep(3600)
fileio._before_replace = pause
from codemods.cli.commands import main
sys.argv = ["auxcap", "migrate", "--write", *sys.argv[3:]]
main()
"""


def build_tree(root: Path) -> dict[Path, tuple[bytes, bytes]]:
    """The files, each with (old bytes, expected new bytes)."""
    expected = {}
    for variant in VARIANTS:
        result = transform_source(variant.encode(), "v.py", TransformOptions())
        expected[variant] = result.rewritten or variant.encode()
    files = {}
    for folder in range(FOLDERS):
        directory = root / f"pkg_{folder:02d}"
        directory.mkdir()
        for index in range(FILES_PER_FOLDER):
            variant = VARIANTS[(folder + index) % len(VARIANTS)]
            path = directory / f"module_{index:02d}.py"
            path.write_bytes(variant.encode())
            files[path] = (variant.encode(), expected[variant])
    return files


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=60)


def changed_count(files) -> int:
    return sum(path.read_bytes() != old for path, (old, _) in files.items())


def wait_until(condition, process: subprocess.Popen, timeout: float = 240) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def check_every_file(files, root: Path) -> list[Path]:
    """Every file is old or new, never anything else; returns the temporary files left."""
    for path, (old, new) in files.items():
        data = path.read_bytes()
        assert data in (old, new), f"{path} is neither its old nor its new content"
    sources = {p for p in root.rglob("*.py")}
    assert sources == set(files), f"unexpected .py files: {sorted(sources - set(files))}"
    temps = [p for p in root.rglob("*") if p.is_file() and p not in files]
    for temp in temps:
        assert fileio.TEMP_PATTERN.match(temp.name), f"unexpected file {temp}"
        assert not temp.name.endswith(".py")
    return temps


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_several_points_never_leaves_a_partial_file(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    files = build_tree(root)
    assert len(files) >= 200

    # 1. The worst moment: the temporary file is complete, the rename has not happened.
    flag = tmp_path / "paused"
    paused = start([sys.executable, "-c", PAUSING_CLI, str(flag), "3", str(root)])
    assert wait_until(flag.exists, paused), "the migrate process never reached its 3rd write"
    temp_path = Path(flag.read_text())
    kill(paused)
    temps = check_every_file(files, root)
    assert temp_path in temps, "the killed process's temporary file should be left behind"
    target = temp_path.parent / temp_path.name.split(".auxcap-")[0][1:]
    old, new = files[target]
    assert target.read_bytes() == old and temp_path.read_bytes() == new

    # 2. Killed at arbitrary points of a normal run, later and later.
    for extra_writes, delay in ((1, 0.0), (4, 0.003), (8, 0.011)):
        baseline = changed_count(files)
        process = start([sys.executable, "-m", "codemods", "migrate", "--write", str(root)])
        target_count = baseline + extra_writes
        reached = wait_until(lambda n=target_count: changed_count(files) >= n, process)
        time.sleep(delay)
        kill(process)
        assert reached, "the migrate process ended before it could be killed"
        check_every_file(files, root)

    done_before = changed_count(files)
    assert 0 < done_before < len(files)

    # 3. The next complete run finishes the job and removes the stale temporary files.
    finish = subprocess.run(
        [sys.executable, "-m", "codemods", "migrate", "--write", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert finish.returncode == 0, finish.stderr
    assert check_every_file(files, root) == []
    for path, (_, new) in files.items():
        assert path.read_bytes() == new
