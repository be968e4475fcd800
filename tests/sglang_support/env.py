"""Cached, unpacked SGLang release trees that import on CPU in subprocesses.

Layout of the cache (root: ``$AUXCAP_CACHE``, default ``~/.cache/auxcap``)::

    wheels/sglang-<ver>-*.whl        from ``pip download --no-deps sglang==<ver>``
    unpacked/sglang-<ver>/sglang/... the wheel's files, extracted once (atomic rename)

``sglang_tree(ver)`` returns the unpacked root (the directory that holds ``sglang/``).
``sglang_env(root)`` returns an ``os.environ`` copy whose ``PYTHONPATH`` puts the stand-in
modules (``stubs/``: triton, torchvision, IPython, xgrammar), the tree, this project and the
``tests`` directory first, so ``python -c "import sglang.srt.models.kimi_linear"`` works on a
CPU-only machine with the packages of ``tests/requirements-sglang.txt`` installed.
Paths before the stubs: the transformers the tree's release pins where this interpreter
has another (``release_deps.tree_paths``).  ``run_python(code_or_args, root)`` runs such a
subprocess with a timeout.

Nothing here imports SGLang into the calling process: SGLang's import has side effects
(logging, env vars, torch settings) that must not leak into the test process.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent.parent
PROJECT_ROOT = TESTS_DIR.parent
STUBS_DIR = Path(__file__).resolve().parent / "stubs"
REQUIREMENTS = TESTS_DIR / "requirements-sglang.txt"
#: Releases the upstream-patch tests exercise; 0.5.21 already relays DSPARK captures under PP.
RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21")


class SGLangUnavailable(RuntimeError):
    """The wheel could not be downloaded or unpacked (no network, no such release)."""


def cache_root() -> Path:
    return Path(os.environ.get("AUXCAP_CACHE") or Path.home() / ".cache" / "auxcap")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise download/unpack between concurrent test processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def find_wheel(version: str) -> Path | None:
    wheels = sorted((cache_root() / "wheels").glob(f"sglang-{version}-*.whl"))
    return wheels[0] if wheels else None


def download_wheel(version: str, timeout: float = 900.0) -> Path:
    """The cached wheel of ``sglang==version``, downloaded (without dependencies) if absent."""
    wheel = find_wheel(version)
    if wheel is not None:
        return wheel
    wheels_dir = cache_root() / "wheels"
    with _locked(cache_root() / f".sglang-{version}.lock"):
        wheel = find_wheel(version)
        if wheel is not None:
            return wheel
        wheels_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(wheels_dir),
            f"sglang=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        wheel = find_wheel(version)
        if proc.returncode != 0 or wheel is None:
            raise SGLangUnavailable(
                f"pip download sglang=={version} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()[-2000:]}"
            )
        return wheel


@contextlib.contextmanager
def staged(target: Path, prefix: str) -> Iterator[Path]:
    """A fresh folder beside ``target`` to fill; once filled it replaces ``target`` with one
    rename, and a failure leaves no half-filled ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def unpacked(
    version: str, folder: str = "unpacked", wanted: Callable[[str], bool] | None = None
) -> Path:
    """Root (holding ``sglang/``) of the ``sglang==version`` wheel's members under
    ``sglang/`` that ``wanted`` keeps (all of them without it), unpacked once into
    ``$AUXCAP_CACHE/<folder>/sglang-<ver>/``."""
    target = cache_root() / folder / f"sglang-{version}"
    if (target / "sglang" / "__init__.py").is_file():
        return target
    wheel = download_wheel(version)
    with _locked(cache_root() / f".sglang-{version}.lock"):
        if (target / "sglang" / "__init__.py").is_file():
            return target
        with staged(target, f".sglang-{version}-") as staging:
            with zipfile.ZipFile(wheel) as archive:
                names = [m for m in archive.namelist() if m.startswith("sglang/")]
                archive.extractall(staging, [m for m in names if wanted is None or wanted(m)])
    return target


def sglang_tree(version: str) -> Path:
    """Root of the unpacked ``sglang==version`` wheel (holds ``sglang/``), created once."""
    return unpacked(version)


def sglang_env(root: Path | None, extra_paths: Sequence[Path] = ()) -> dict[str, str]:
    """Environment for a subprocess that imports SGLang from ``root`` on CPU, with the
    transformers ``root``'s release pins."""
    from sglang_support.release_deps import tree_paths

    paths = [str(p) for p in extra_paths]
    paths += [str(p) for p in tree_paths(root) if p not in extra_paths]
    paths += [str(STUBS_DIR)]
    if root is not None:
        paths.append(str(root))
    paths += [str(PROJECT_ROOT), str(TESTS_DIR)]
    env = dict(os.environ)
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def run_python(
    args: Sequence[str],
    root: Path | None,
    *,
    timeout: float = 300.0,
    extra_paths: Sequence[Path] = (),
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGS`` under :func:`sglang_env`, started warm (:mod:`sglang_support.warm`);
    never hangs past ``timeout``."""
    from sglang_support import warm

    return warm.run(
        args, env=sglang_env(root, extra_paths), cwd=cwd or PROJECT_ROOT, timeout=timeout
    )


def run_check(
    module: str, config: dict, root: Path, *, timeout: float, mode: str | None = None
) -> Any:
    """Run the check ``python -m sglang_support.<module> [MODE] CONFIG`` (``config`` as JSON)
    on the tree ``root``; it must succeed; what it printed last, read as JSON."""
    args = ["-m", f"sglang_support.{module}", *([mode] if mode else []), json.dumps(config)]
    proc = run_python(args, root, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def linked_copy(root: Path, dest: Path, writable: Sequence[str] = ()) -> Path:
    """Copy the tree ``root`` to ``dest`` with hard links (fast, no extra space), then make
    the files named in ``writable`` (POSIX paths relative to ``root``) private copies, so
    patching them never touches the cached original."""
    shutil.copytree(root, dest, copy_function=os.link)
    for rel in writable:
        target = dest.joinpath(*rel.split("/"))
        if target.exists():
            data = target.read_bytes()
            target.unlink()
            target.write_bytes(data)
    return dest


def git_apply(root: Path, patch: str, *, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``git apply [--check]`` of ``patch`` in ``root`` (works outside a repository)."""
    args = ["git", "apply", "--check"] if check else ["git", "apply"]
    return subprocess.run(args, cwd=root, input=patch, text=True, capture_output=True, timeout=60)
