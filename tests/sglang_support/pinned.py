"""Run a release's code under the transformers release that release pins.

Each SGLang release wheel pins one transformers version (``Requires-Dist:
transformers==X`` in its METADATA); its model configs and the shipped tests' tiny configs
are written against it.  ``release_python(root)`` is the interpreter a subprocess that
imports the tree at ``root`` runs with:

* this interpreter, when the pin is the transformers installed here (or the tree is not a
  release whose wheel is cached);
* otherwise ``$AUXCAP_CACHE/venvs/transformers-<X>/bin/python``, a venv made once per
  pinned version (under a lock, then reused): ``transformers==X`` and the packages it
  needs newer than here are installed into it with ``-c scripts/constraints.txt``, and a
  ``.pth`` file puts this interpreter's site-packages after its own, so torch and every
  other package come from here (no second torch is ever resolved).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
import zipfile
from functools import cache
from pathlib import Path

from sglang_support import env

CONSTRAINTS = env.PROJECT_ROOT / "scripts" / "constraints.txt"
_PIN = re.compile(r"^Requires-Dist:\s*transformers\s*==\s*([0-9][^\s;,]*)", re.MULTILINE)
_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def tree_version(root: Path) -> str | None:
    """The SGLang version of the tree at ``root`` (``sglang/_version.py``), if it says."""
    path = Path(root) / "sglang" / "_version.py"
    if not path.is_file():
        return None
    found = _VERSION.search(path.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def pinned_transformers(version: str) -> str | None:
    """The transformers version the cached wheel of ``sglang==version`` pins."""
    wheel = env.find_wheel(version)
    if wheel is None:
        return None
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(names[0]).decode("utf-8") if names else ""
    found = _PIN.search(metadata)
    return found.group(1) if found else None


def installed_transformers() -> str:
    return importlib.metadata.version("transformers")


def venv_dir(version: str) -> Path:
    return env.cache_root() / "venvs" / f"transformers-{version}"


def _ready(venv: Path, version: str) -> bool:
    python = venv / "bin" / "python"
    if not python.exists() or not (venv / ".ready").is_file():
        return False
    return (venv / ".ready").read_text().strip() == version


def transformers_python(version: str, timeout: float = 900.0) -> Path:
    """The interpreter of the cached venv for ``transformers==version`` (made once)."""
    venv = venv_dir(version)
    if _ready(venv, version):
        return venv / "bin" / "python"
    with env._locked(env.cache_root() / f".transformers-{version}.lock"):
        if _ready(venv, version):
            return venv / "bin" / "python"
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)],
            check=True,
            timeout=120,
        )
        python = venv / "bin" / "python"
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        # This interpreter's packages (torch above all) after the venv's own.
        here = sysconfig.get_paths()["purelib"]
        (Path(site) / "zz_auxcap_base.pth").write_text(f"{here}\n")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(python),
                "install",
                "--disable-pip-version-check",
                "--no-compile",
                "-q",
                "-c",
                str(CONSTRAINTS),
                f"transformers=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise env.SGLangUnavailable(
                f"installing transformers=={version} into {venv} failed: {proc.stderr[-2000:]}"
            )
        check = subprocess.run(
            [str(python), "-c", "import torch, transformers; print(transformers.__version__)"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check.returncode != 0 or check.stdout.strip() != version:
            raise env.SGLangUnavailable(f"{venv}: {check.stdout}{check.stderr[-2000:]}")
        (venv / ".ready").write_text(version)
    return venv / "bin" / "python"


@cache
def _python_for(version: str | None) -> str:
    pin = pinned_transformers(version) if version else None
    if pin is None or pin == installed_transformers():
        return sys.executable
    return str(transformers_python(pin))


def release_python(root: Path | None) -> str:
    """The interpreter that runs code of the tree at ``root`` (see the module docstring)."""
    return _python_for(None if root is None else tree_version(root))
