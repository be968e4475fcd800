"""Shared fixtures.

``sglang_release``: factory ``(version) -> Path`` giving the unpacked root of a real SGLang
release wheel (downloaded into ``$AUXCAP_CACHE`` on first use).  Tests that use it carry the
``sglang`` marker; a failed download is an error, not a skip, so a missing network shows.
"""

from __future__ import annotations

import pytest
from sglang_support.env import sglang_tree


@pytest.fixture(scope="session")
def sglang_release():
    return sglang_tree


def pytest_collection_modifyitems(session, config, items):
    """Test files with slow tests (real release wheels, spawned pipeline stages) run first,
    each file's tests kept together and in their order: with ``--dist loadfile`` the long
    files start at once instead of leaving one worker busy after the other has finished."""
    first_seen: dict[str, int] = {}
    slow_files: set[str] = set()
    for index, item in enumerate(items):
        path = str(item.path)
        first_seen.setdefault(path, index)
        if item.get_closest_marker("slow") is not None:
            slow_files.add(path)
    items.sort(key=lambda item: (str(item.path) not in slow_files, first_seen[str(item.path)]))
