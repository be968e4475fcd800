"""Each command needs only what its install brings.

``pip install auxcap`` brings LibCST, click and GitPython: scan, migrate (``--branch``
included) and upstream-patch (``--pr-body`` and ``--branch`` included) must run with
nothing else.  ``pip install 'auxcap[pp]'`` adds torch, and only torch: validate-pp must
run without numpy.  The fast tests here hide a module from a subprocess (a package of that
name that raises ``ModuleNotFoundError``, first on ``PYTHONPATH``, as Python does for a
module that is not installed); ``test_fresh_installs.py`` installs into real virtualenvs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def hide_modules(where: Path, *names: str) -> Path:
    """A folder that, first on ``PYTHONPATH``, makes ``import NAME`` fail as if NAME were
    not installed."""
    for name in names:
        package = where / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {name!r}'!r}, name={name!r})\n"
        )
    return where


def auxcap_without(hidden: Path, *args: str, cwd: Path, timeout: float = 240):
    """``python -m codemods ARGS`` with the modules in ``hidden`` not importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(PROJECT_ROOT)])}
    return subprocess.run(
        [sys.executable, "-m", "codemods", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_hiding_a_module_makes_it_unimportable(tmp_path):
    hidden = hide_modules(tmp_path / "hidden", "torch")
    env = {**os.environ, "PYTHONPATH": str(hidden)}
    done = subprocess.run(
        [sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'torch'" in done.stderr


def test_validate_pp_needs_torch_only_not_numpy(tmp_path):
    hidden = hide_modules(tmp_path / "hidden", "numpy")
    done = auxcap_without(
        hidden,
        "validate-pp", "--world-size", "3", "--mode", "both", "--select",
        "one-per-stage [even]",
        "--timeout", "60",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Numpy is not available" not in done.stdout + done.stderr
    summary = re.search(r"(\d+)/(\d+) scenarios passed", done.stdout)
    assert summary and summary.group(1) == summary.group(2) != "0", done.stdout
    assert " direct " in done.stdout  # the handshake and the dedicated group, too
