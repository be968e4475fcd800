"""``bash scripts/demo.sh``, the README's first command: what it shows."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def run_demo(env_extra: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1", **env_extra}
    return subprocess.run(
        ["bash", str(PROJECT_ROOT / "scripts" / "demo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_demo_output(stdout: str) -> None:
    sections = [
        "== auxcap scan fixtures/demo_repo",
        "== auxcap migrate fixtures/demo_repo",
        "== auxcap migrate --check fixtures/demo_repo",
        "== next steps",
    ]
    positions = [stdout.index(section) for section in sections]
    assert positions == sorted(positions), stdout
    assert "train_distill.py:" in stdout  # a scanned call site
    assert "+++ b/fixtures/demo_repo/train_distill.py" in stdout  # the diff
    assert "exit code of --check: 1 (0 nothing to do, 1 changes needed" in stdout
    steps = stdout.split("== next steps", 1)[1]
    for needle in (
        "/bin/activate",
        "auxcap migrate --write fixtures/demo_repo",
        "--branch auxcap/guard-capture --pr-body PR.md",
        "auxcap upstream-patch ",
        "auxcap sglang apply",
        "bash scripts/test.sh",
    ):
        assert needle in steps, needle


def test_demo_shows_scan_diff_check_code_and_next_steps():
    python = shlex.quote(sys.executable)
    done = run_demo({"AUXCAP": f"{python} -m codemods", "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == 0, done.stderr
    assert_demo_output(done.stdout)


def test_readme_first_command_is_the_demo_and_installs_the_base_package_only():
    readme = (PROJECT_ROOT / "README.md").read_text()
    first = readme.split("```bash\n", 1)[1].splitlines()[:2]
    assert first[0].startswith("bash scripts/demo.sh ")
    assert first[1].startswith("bash scripts/test.sh ")
    script = (PROJECT_ROOT / "scripts" / "demo.sh").read_text()
    installs = [
        line
        for line in script.splitlines()
        if "pip install" in line and not line.lstrip().startswith(("#", "pip install '.[pp]'"))
    ]
    assert installs and all("[" not in line and "torch" not in line for line in installs)
