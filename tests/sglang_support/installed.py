"""Fresh interpreters with an SGLang release for ``auxcap sglang`` tests.

``fresh_venv(dest)`` makes a venv without pip; ``install_wheel(python, wheel)`` installs a
release wheel into it with ``pip install --no-deps`` (run by this interpreter's pip);
``editable_checkout(release, dest, python)`` lays the unpacked release out as a checkout
(``dest/python/sglang``, a git repository with one commit) and puts ``dest/python`` on the
venv's path with a ``.pth`` file, the way an editable install does.

``tree_hashes(directory)`` is the sha256 of every file under a directory (compiled files
left out), to show that a command left every byte as it was.  ``sglang(*args)`` runs
``auxcap sglang ...`` in this process (so tests can hook the transaction) and
``drive_llama(root)`` drives the llama stages of the tree at ``root`` as two gloo pipeline
stages and compares them with PP=1 (``stage_check``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from codemods.cli.commands import cli
from sglang_support.env import run_python
from tests.gitrepo import IDENTITY, git

RELEASE = "0.5.23"
MODELS = "llama"
#: llama, captures on both stages given out of order, two stages (relay).
DRIVE = {
    "num_layers": 9,
    "hidden_size": 4,
    "tokens": [3, 0, 2],
    "timeout": 120,
    "runs": [{"model": "llama", "hook": "eagle3", "layer_ids": [7, 0, 4], "pp": 2}],
}


def fresh_venv(dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120
    )
    return dest / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(out.stdout.strip())


def install_wheel(python: Path, wheel: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-compile",
            "--disable-pip-version-check",
            "-q",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )


def editable_checkout(release: Path, dest: Path, python: Path) -> Path:
    """``dest`` as an SGLang checkout of the unpacked ``release``, committed, importable by
    ``python`` through a ``.pth`` file."""
    shutil.copytree(release / "sglang", dest / "python" / "sglang")
    (dest / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "release", env=IDENTITY)
    (site_packages(python) / "sglang_checkout.pth").write_text(f"{dest / 'python'}\n")
    return dest


def tree_hashes(directory: Path) -> dict[str, str]:
    hashes = {}
    for folder, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = Path(folder, name)
            hashes[path.relative_to(directory).as_posix()] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
    return hashes


def sglang(*args: str):
    """``auxcap sglang ARGS`` in this process: the click result."""
    return CliRunner().invoke(cli, ["sglang", *args])


def drive_llama(root: Path) -> dict:
    """The one run of ``DRIVE`` on the tree at ``root`` (holds ``sglang/``)."""
    proc = run_python(["-m", "sglang_support.stage_check", json.dumps(DRIVE)], root, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["runs"][0]


def break_llama(path: Path) -> None:
    """An edit (as another patch might make) after which the rewriters no longer recognise
    llama's layer-entry capture: the capture gets a second condition."""
    text = path.read_text()
    old = "                if i in self.layers_to_capture\n"
    assert old in text
    path.write_text(
        text.replace(
            old, "                if i in self.layers_to_capture and self.spec_capture_on\n", 1
        )
    )
