"""Shared fixtures.

``sglang_release``: factory ``(version) -> Path`` giving the unpacked root of a real SGLang
release wheel (downloaded into ``$AUXCAP_CACHE`` on first use).  Tests that use it carry the
``sglang`` marker; a failed download is an error, not a skip, so a missing network shows.

The whole upstream patch of a release is generated once per session
(``sglang_support.generated``), in a folder every xdist worker of the session shares.
"""

from __future__ import annotations

import os

import pytest
from sglang_support import generated
from sglang_support.env import cache_root, sglang_tree


@pytest.fixture(scope="session")
def sglang_release():
    # The session's cache, also for a test that has pointed HOME elsewhere (``isolate_git``).
    root = str(cache_root())

    def release(version: str):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AUXCAP_CACHE", root)
            return sglang_tree(version)

    return release


@pytest.fixture(scope="session", autouse=True)
def _shared_generation(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's base sits in the session's own folder.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    generated.use_cache_dir(shared / "auxcap-generated")
    yield
    generated.use_cache_dir(None)


def pytest_collection_modifyitems(session, config, items):
    """Test files with slow tests (real release wheels, spawned pipeline stages) run first,
    the heaviest first, each file's tests kept together and in their order: with ``--dist
    loadfile`` the long files start at once and the short ones fill in at the end, instead
    of leaving one worker busy after the other has finished.  A file's weight counts its
    tests that need a release wheel and are slow (3), slow only (2) or need a wheel (1)."""
    first_seen: dict[str, int] = {}
    weight: dict[str, int] = {}
    for index, item in enumerate(items):
        path = str(item.path)
        first_seen.setdefault(path, index)
        slow = item.get_closest_marker("slow") is not None
        wheel = item.get_closest_marker("sglang") is not None
        weight[path] = weight.get(path, 0) + (3 if slow and wheel else 2 if slow else int(wheel))
    items.sort(key=lambda item: (-weight[str(item.path)], first_seen[str(item.path)]))
