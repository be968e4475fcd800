"""The registry drives the caller codemods: each entry's transformer performs the entry's
action with the entry's policy choices, and the command line's options come from it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from codemods.callers.options import TransformOptions
from codemods.callers.rewrite import registry
from codemods.callers.rewrite.callsite_codemod import CallSiteCodemod
from codemods.cli.commands import cli


@pytest.mark.parametrize("entry", registry.ENTRIES, ids=lambda e: e.metadata.id)
def test_entry_transformer_matches_its_metadata(entry):
    transformer = entry.load()
    assert issubclass(transformer, CallSiteCodemod)
    assert transformer.ACTION.value == entry.metadata.action
    assert transformer.POLICIES == entry.metadata.policy.names
    assert entry.metadata.policy.default in transformer.POLICIES
    with pytest.raises(ValueError, match=entry.metadata.policy.label):
        transformer("x.py", "no-such-policy")


def test_migrate_options_and_help_come_from_the_registry():
    result = CliRunner().invoke(cli, ["migrate", "--help"])
    assert result.exit_code == 0
    for metadata in registry.CODEMODS:
        assert metadata.policy.flag in result.output
        assert metadata.id in result.output
        # every policy option is a field of the run's options
        assert hasattr(TransformOptions(), metadata.policy.dest)


def test_actions_are_the_entries_actions():
    assert {action.value for action in registry.ACTIONS} == {
        entry.action for entry in registry.ENTRIES
    }


def test_options_hold_one_policy_per_entry():
    options = TransformOptions(guard_policy="raise")
    assert options.policies == tuple(
        (m.id, "raise" if m is registry.GUARD else m.policy.default) for m in registry.CODEMODS
    )
    assert options.policy(registry.GUARD) == options.guard_policy == "raise"
    assert TransformOptions(policies={registry.FALLBACK.id: "raise"}).fallback_policy == "raise"
    with pytest.raises(TypeError, match="no_such_policy"):
        TransformOptions(no_such_policy="x")
    with pytest.raises(ValueError, match="unknown codemod"):
        TransformOptions(policies={"auxcap:python/none": "x"})
    with pytest.raises(AttributeError):
        _ = options.no_such_policy
