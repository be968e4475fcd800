"""``sglang_support.warm``: a run started warm answers as the same command run cold."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sglang_support import warm
from sglang_support.env import sglang_env

pytestmark = pytest.mark.timeout(300)

#: What a program can see of how it was started.
PROBE = """\
import os, sys
print(repr(sys.argv))
print(repr(sys.path[0]))
print(os.getcwd())
print(os.environ.get("AUXCAP_PROBE"))
print(__name__)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture(scope="module")
def env():
    found = sglang_env(None)
    found["AUXCAP_PROBE"] = "probe value"
    return found


def _cold(args, env, cwd):
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("form", ["-c", "-m", "script"])
def test_a_warm_run_sees_what_a_cold_run_sees(form, env, tmp_path):
    (tmp_path / "probe_module.py").write_text(PROBE)
    args = {
        "-c": ["-c", PROBE, "x", "3"],
        "-m": ["-m", "probe_module", "x", "3"],
        "script": [str(tmp_path / "probe_module.py"), "x", "3"],
    }[form]
    warm_run = warm.run(args, env=env, cwd=tmp_path, timeout=120)
    cold_run = _cold(args, env, tmp_path)
    assert warm_run.returncode == cold_run.returncode == 3
    assert warm_run.stdout == cold_run.stdout
    assert "probe value" in warm_run.stdout
    assert warm_run.stderr == cold_run.stderr == "to stderr\n"


def test_the_run_has_the_packages_loaded_and_keeps_nothing_of_an_earlier_run(env, tmp_path):
    first = warm.run(
        ["-c", "import sys, torch; torch.left_by_a_run = 1; print('torch' in sys.modules)"],
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert first.returncode == 0 and first.stdout == "True\n", first.stderr
    # Started with torch imported (the warm part), and without what the first run set.
    second = warm.run(
        [
            "-c",
            "import sys; print('torch' in sys.modules, hasattr(sys.modules['torch'], 'left_by_a_run'))",
        ],
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert second.stdout == "True False\n", second.stderr


def test_an_uncaught_exception_reads_as_the_interpreter_writes_it(env, tmp_path):
    run = warm.run(["-c", "raise ValueError('no such layer')"], env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == "ValueError: no such layer"
    assert "warm_server" not in run.stderr


def test_a_run_past_its_timeout_is_killed_with_its_children(env, tmp_path):
    marker = tmp_path / "child.pid"
    program = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run(["-c", program], env=env, cwd=tmp_path, timeout=10)
    assert time.monotonic() - started < 60
    child = int(marker.read_text())
    deadline = time.monotonic() + 20
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    # Gone, or a zombie its killed parent left to init.
    assert (
        not Path(f"/proc/{child}").exists()
        or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    )


def test_a_package_the_run_would_import_from_elsewhere_is_not_the_preloaded_one(env, tmp_path):
    # A folder that holds an SGLang tree is not part of the server's key; here it also
    # holds a numpy of its own, which the run must import instead of the preloaded one.
    tree = tmp_path / "tree"
    (tree / "sglang").mkdir(parents=True)
    (tree / "numpy").mkdir()
    (tree / "numpy" / "__init__.py").write_text("SHADOW = True\n")
    shadowed = dict(env)
    shadowed["PYTHONPATH"] = os.pathsep.join([str(tree), env["PYTHONPATH"]])
    run = warm.run(
        ["-c", "import numpy; print(getattr(numpy, 'SHADOW', False))"],
        env=shadowed,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout == "True\n", run.stderr


#: A script named by a relative path that starts a spawned child: the child re-imports the
#: script from the run's directory, as it does when the script is run cold.
SPAWNS = """\
import multiprocessing as mp

def child(queue):
    queue.put("child ran")

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    print(queue.get(timeout=60))
    proc.join(60)
    print(proc.exitcode)
"""


def test_a_spawned_child_of_a_relative_script_starts_in_the_run_directory(env, tmp_path):
    (tmp_path / "spawns.py").write_text(SPAWNS)
    warm_run = warm.run(["spawns.py"], env=env, cwd=tmp_path, timeout=120)
    cold_run = _cold(["spawns.py"], env, tmp_path)
    assert cold_run.stdout == "child ran\n0\n", cold_run.stderr
    assert warm_run.returncode == 0 and warm_run.stdout == cold_run.stdout, warm_run.stderr
