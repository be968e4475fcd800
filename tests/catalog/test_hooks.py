import pytest

from codemods.catalog.hooks import (
    CATALOG,
    HOOK_NAME_PATTERN,
    NONE_ERROR_DSPARK,
    HookSet,
    custom_hook,
)


def test_catalog_names_follow_the_hook_spelling():
    for hook in CATALOG:
        assert HOOK_NAME_PATTERN.match(hook.name), hook.name


def test_eagle3_accepts_none_and_dspark_does_not():
    hooks = HookSet()
    assert hooks.get("set_eagle3_layers_to_capture").accepts_none is True
    dspark = hooks.get("set_dspark_layers_to_capture")
    assert dspark.accepts_none is False
    assert dspark.none_error == ("ValueError", NONE_ERROR_DSPARK)


def test_user_added_hooks_are_strict_and_deduplicated():
    hooks = HookSet.with_extra(
        [
            "set_medusa_layers_to_capture",
            "set_medusa_layers_to_capture",
            "set_dspark_layers_to_capture",
        ]
    )
    assert len(hooks.hooks) == len(CATALOG) + 1
    medusa = hooks.get("set_medusa_layers_to_capture")
    assert medusa.family == "medusa" and medusa.accepts_none is False
    assert "set_medusa_layers_to_capture" in hooks.names


def test_custom_hook_rejects_non_identifiers():
    with pytest.raises(ValueError):
        custom_hook("not a name")
