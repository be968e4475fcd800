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
