"""Drift test: re-derive the hook facts from each SGLang release wheel and compare them with
the checked-in codemods/catalog/hook_facts.json (regenerate with scripts/derive_hook_facts.py)."""

from __future__ import annotations

import json

import pytest
from hook_facts_script import release_view

from codemods.catalog import derive
from codemods.catalog import hook_facts as hf

pytestmark = [pytest.mark.slow, pytest.mark.sglang]


def test_data_file_covers_the_derived_releases():
    assert hf.releases() == derive.RELEASES


@pytest.mark.parametrize("release", derive.RELEASES)
def test_checked_in_facts_match_the_wheel(release, sglang_release):
    root = sglang_release(release)
    derived = derive.derive_release(root)
    checked_in = release_view(json.loads(hf.DATA_FILE.read_text(encoding="utf-8")), release)
    assert sorted(derived) == sorted(checked_in)
    for hook in derived:
        assert derived[hook] == checked_in[hook], (
            f"{hook} in sglang=={release} differs from {hf.DATA_FILE.name}; "
            "run scripts/derive_hook_facts.py"
        )
