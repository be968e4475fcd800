"""The whole upstream patch of a cached release tree, generated once per test session.

``release_result(root)`` is ``generate(root)`` (every model, no ``--models``) for a tree
under ``env.cache_root() / "unpacked"`` (the unpacked release wheels, which never change;
the cache root as it was when the folder below was named).
Once ``use_cache_dir(folder)`` has named a folder (``tests/conftest.py`` names one under
the session's temporary root, which every xdist worker of the session shares), the first
caller generates the result and stores it there, keyed by the release and a digest of the
``codemods`` sources; later callers, in any worker, load it.  A file lock per key keeps
two workers from generating the same release at once.  Every call returns its own copy.

The stored result keeps the parsed modules of its plan only for the files that
``FamilyPlan.fixes_only`` reads (the patch series needs them); ``FamilyPlan.rewritten``
wants them all and is not available on it.  Other trees, and a session that named no
folder, get ``generate(root)`` itself.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_support.env import cache_root

if TYPE_CHECKING:
    from codemods.upstream.result import UpstreamResult

_CACHE_DIR: Path | None = None
_RELEASES: Path | None = None
_DIGEST: str | None = None


def use_cache_dir(folder: Path | None) -> None:
    global _CACHE_DIR, _RELEASES
    _CACHE_DIR = None if folder is None else Path(folder)
    _RELEASES = (cache_root() / "unpacked").resolve()


def codemods_digest() -> str:
    """sha256 over the path and bytes of every file of the ``codemods`` package this
    process imports."""
    global _DIGEST
    if _DIGEST is None:
        import codemods

        package = Path(codemods.__file__).resolve().parent
        digest = hashlib.sha256()
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(package)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
        _DIGEST = digest.hexdigest()
    return _DIGEST


def _is_release(root: Path) -> bool:
    return root.resolve().parent == _RELEASES


def _slim(result: UpstreamResult) -> UpstreamResult:
    slim = copy.copy(result)
    if result.family is not None:
        plan = copy.copy(result.family)
        keep = set(plan.stack_setters) | set(plan.stage_fixes)
        plan.modules = {file: module for file, module in plan.modules.items() if file in keep}
        slim.family = plan
    return slim


def release_result(root: str | Path) -> UpstreamResult:
    from codemods.upstream.generate import generate

    root = Path(root)
    if _CACHE_DIR is None or not _is_release(root):
        return generate(root)
    key = hashlib.sha256(f"{codemods_digest()}\0{root.resolve()}".encode()).hexdigest()[:32]
    _CACHE_DIR.mkdir(parents=True, exist_ok=True)
    stored = _CACHE_DIR / f"{root.name}-{key}.pickle"
    with open(_CACHE_DIR / f"{root.name}-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if stored.exists():
                return pickle.loads(stored.read_bytes())
            data = pickle.dumps(_slim(generate(root)), protocol=pickle.HIGHEST_PROTOCOL)
            partial = stored.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(data)
            os.replace(partial, stored)
            return pickle.loads(data)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
