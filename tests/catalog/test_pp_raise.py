"""Which hooks the fallback codemod treats as able to raise NotImplementedError under PP."""

from __future__ import annotations

import dataclasses

import pytest

from codemods.catalog import hook_facts
from codemods.catalog.hooks import CATALOG, HookSet, custom_hook
from codemods.catalog.pp_raise import can_raise_not_implemented, raising_hooks

HOOKS = {hook.name: hook for hook in CATALOG}
DSPARK = HOOKS["set_dspark_layers_to_capture"]
DFLASH = HOOKS["set_dflash_layers_to_capture"]
EAGLE3 = HOOKS["set_eagle3_layers_to_capture"]
MSD = HOOKS["set_msd_layers_to_capture"]


def test_dspark_and_dflash_can_raise_eagle3_never():
    assert can_raise_not_implemented(DSPARK)
    assert can_raise_not_implemented(DFLASH)
    assert not can_raise_not_implemented(EAGLE3)


def test_the_answer_follows_the_facts_for_every_known_catalog_hook():
    for hook in CATALOG:
        if hook_facts.is_known(hook.name):
            expected = hook_facts.may_raise_not_implemented(hook.name)
            assert can_raise_not_implemented(hook) is expected, hook.name


def test_releases_narrow_the_answer():
    # Kimi-Linear / Kimi-K3 stopped raising after 0.5.20.
    assert can_raise_not_implemented(DSPARK, "0.5.20")
    assert not can_raise_not_implemented(DSPARK, "0.5.21")
    assert can_raise_not_implemented(DSPARK, ["0.5.21", "0.5.18"])
    with pytest.raises(ValueError, match="unknown SGLang release"):
        can_raise_not_implemented(DSPARK, "0.4.0")


def test_user_hooks_and_hooks_without_facts_are_treated_like_dspark():
    assert not hook_facts.is_known(MSD.name)
    assert can_raise_not_implemented(MSD)
    assert can_raise_not_implemented(custom_hook("set_medusa_layers_to_capture"))


def test_a_hook_without_a_pp_error_never_raises():
    assert not can_raise_not_implemented(dataclasses.replace(DSPARK, pp_error=None))


def test_raising_hooks_keeps_order_and_drops_eagle3():
    hooks = HookSet.with_extra(("set_custom_layers_to_capture",)).hooks
    names = [hook.name for hook in raising_hooks(hooks)]
    assert names == [
        "set_dspark_layers_to_capture",
        "set_dflash_layers_to_capture",
        "set_msd_layers_to_capture",
        "set_custom_layers_to_capture",
    ]
    assert raising_hooks([EAGLE3]) == ()
