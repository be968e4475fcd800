"""The PP refusals of the patched tree are found once, by ``generate``; the texts read them
from the result and find them again only for a result made otherwise."""

from __future__ import annotations

import pytest
from sglang_support.hook_trees import hook_tree

from codemods.upstream.generate import generate
from codemods.upstream.output import result_facts
from codemods.upstream.tree import reachability

pytestmark = pytest.mark.sglang


def test_generate_finds_the_refusals_once_and_the_texts_reuse_them(monkeypatch):
    result = generate(hook_tree("0.5.23"), models=["llama"])
    new = {change.path: change.new for change in result.changes}
    assert result.refusals == reachability.tree_refusals(result.tree, new)
    assert result.refusals  # 0.5.23 refuses DSPARK with PP, among others

    calls = []
    monkeypatch.setattr(result_facts, "tree_refusals", lambda *args: calls.append(args) or [])
    assert result_facts.refusals(result) is result.refusals
    assert calls == []
    result.refusals = None
    assert result_facts.refusals(result) == [] and len(calls) == 1
