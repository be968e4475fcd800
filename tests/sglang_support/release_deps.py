"""The transformers release an SGLang release pins, in a cached site directory of its own.

``pinned_transformers(version)`` reads ``Requires-Dist: transformers==X`` from the release
wheel's ``METADATA`` (whatever extra it sits under).  ``transformers_site(x)`` is
``$AUXCAP_CACHE/transformers/<x>``: ``pip install --target`` of ``transformers==x`` and of
only those of its dependencies this interpreter lacks at a version that fits (pip's own
resolver run against this environment, ``--dry-run --report``), constrained by
``scripts/constraints.txt`` so that no other torch is ever installed; made once per
transformers release (under a lock, moved into place whole) and shared by every SGLang
release that pins it.  ``release_paths(version)`` is what to put first on a subprocess's
``PYTHONPATH`` to import that release with its transformers: the site directory, or
nothing when this interpreter has that transformers already.  ``tree_paths(root)`` is the
same for the SGLang tree at ``root`` (an unpacked release or a copy of one: its version
read from ``sglang/_version.py``); ``env.sglang_env`` puts them first for every tree, so
each release's code, shipped tests included, runs under the transformers it pins.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from sglang_support.env import (
    PROJECT_ROOT,
    _locked,
    cache_root,
    download_wheel,
    find_wheel,
    staged,
)

CONSTRAINTS = PROJECT_ROOT / "scripts" / "constraints.txt"
_PIN = re.compile(r"^Requires-Dist:\s*transformers\s*==\s*([^\s;,]+)", re.M)
_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def pinned_transformers(version: str) -> str:
    """The transformers release the wheel of ``sglang==version`` requires exactly."""
    with zipfile.ZipFile(download_wheel(version)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    match = _PIN.search(metadata)
    if match is None:
        raise LookupError(f"sglang {version}: no Requires-Dist pinning transformers")
    return match.group(1)


def _pip(*args: str, timeout: float = 900.0) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def _missing(requirement: str) -> list[str]:
    """``name==version`` of every package ``pip install requirement`` would install into
    this environment (the requirement and the dependencies it lacks)."""
    proc = _pip("install", "--dry-run", "-q", "--report", "-", "-c", str(CONSTRAINTS), requirement)
    report = json.loads(proc.stdout)
    return [
        f"{item['metadata']['name']}=={item['metadata']['version']}" for item in report["install"]
    ]


def transformers_site(version: str) -> Path:
    """The cached site directory holding ``transformers==version`` (see the module
    docstring)."""
    target = cache_root() / "transformers" / version
    if (target / "transformers" / "__init__.py").is_file():
        return target
    with _locked(cache_root() / f".transformers-{version}.lock"):
        if (target / "transformers" / "__init__.py").is_file():
            return target
        packages = _missing(f"transformers=={version}")
        if any(package.split("==")[0].lower() == "torch" for package in packages):
            raise RuntimeError(f"transformers=={version} would install another torch")
        with staged(target, f".transformers-{version}-") as staging:
            _pip("install", "-q", "--no-deps", "--no-compile", "--target", str(staging), *packages)
    return target


def release_paths(version: str) -> list[Path]:
    """Paths to put first on ``PYTHONPATH`` for ``sglang==version``'s own transformers."""
    pinned = pinned_transformers(version)
    try:
        if importlib.metadata.version("transformers") == pinned:
            return []
    except importlib.metadata.PackageNotFoundError:
        pass
    return [transformers_site(pinned)]


def tree_version(root: Path) -> str | None:
    """The SGLang version of the tree at ``root`` (``sglang/_version.py``), if it says."""
    path = Path(root) / "sglang" / "_version.py"
    if not path.is_file():
        return None
    found = _VERSION.search(path.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def tree_paths(root: Path | None) -> list[Path]:
    """:func:`release_paths` of the tree at ``root``; none for a tree that is not a
    release (no version, or no cached wheel of it)."""
    version = tree_version(root) if root is not None else None
    if version is None or find_wheel(version) is None:
        return []
    return release_paths(version)
