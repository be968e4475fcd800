"""The shipped tests' code is chosen per release: one branch of each marked place, no
markers and no code for other releases left in the test a patch adds."""

from __future__ import annotations

import pytest

from codemods.upstream.tree.sglang_tree import detect_tree
from codemods.upstream.tree.test_variants import (
    FEATURES,
    VariantError,
    select,
    tree_features,
)
from codemods.upstream.validation.shipped_tests import INIT_TEST_TEMPLATE, render_test_utils

TEMPLATE = (
    "a = 1\n"
    "    # @@if public_allocate\n"
    "b = 'public'\n"
    "    # @@if pp_compat_check\n"
    "c = 'checked'\n"
    "    # @@end pp_compat_check\n"
    "    # @@else public_allocate\n"
    "b = 'private'\n"
    "    # @@end public_allocate\n"
    "d = 4\n"
)


def test_select_keeps_the_branch_each_feature_calls_for():
    both = {"public_allocate": True, "pp_compat_check": True}
    assert select(TEMPLATE, both) == "a = 1\nb = 'public'\nc = 'checked'\nd = 4\n"
    unchecked = {"public_allocate": True, "pp_compat_check": False}
    assert select(TEMPLATE, unchecked) == "a = 1\nb = 'public'\nd = 4\n"
    private = {"public_allocate": False, "pp_compat_check": True}
    assert select(TEMPLATE, private) == "a = 1\nb = 'private'\nd = 4\n"


@pytest.mark.parametrize(
    "broken",
    [
        "# @@if nothing_known\n# @@end nothing_known\n",
        "# @@if public_allocate\n",
        "# @@end public_allocate\n",
        "# @@if public_allocate\n# @@end pp_compat_check\n",
    ],
)
def test_markers_that_do_not_nest_or_name_no_feature_are_refused(broken):
    with pytest.raises(VariantError):
        select(broken, dict.fromkeys(FEATURES, True))


@pytest.mark.sglang
@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.5.20", (False, True, True, False, True, False, True, False)),
        ("0.5.21", (True, True, True, False, True, True, True, False)),
        ("0.5.23", (True, True, True, True, True, True, True, False)),
    ],
)
def test_each_release_gets_its_own_plain_init_test(sglang_release, version, expected):
    features = tree_features(detect_tree(sglang_release(version)))
    assert tuple(features[name] for name in FEATURES) == expected
    text = select(INIT_TEST_TEMPLATE.read_text(encoding="utf-8"), features)
    assert "# @@" not in text.replace("# @@PATCHED_MODELS@@", "")
    compile(text, "test_pp_aux_capture.py", "exec")
    # No code that asks which release it runs on.
    for probe in ("inspect.signature", "getattr(buffers", "getattr(hook", "if check is None"):
        assert probe not in text, probe
    public = "buffers.allocate_pp_proxy_tensors" in text
    assert public == features["public_allocate"]
    assert ("def test_validation_accepts" in text) == features["pp_compat_check"]


@pytest.mark.sglang
@pytest.mark.parametrize(("version", "sglang_stub"), [("0.5.3", False), ("0.5.23", True)])
def test_sgl_kernel_is_stood_in_by_sglang_where_the_release_can(
    sglang_release, version, sglang_stub
):
    tree = detect_tree(sglang_release(version))
    text = render_test_utils(tree_features(tree))
    assert "# @@" not in text
    compile(text, "pp_aux_capture_family_models.py", "exec")
    assert ("maybe_stub_sgl_kernel()" in text) == sglang_stub
    assert ('"sgl_kernel"' in text) == (not sglang_stub)


@pytest.mark.sglang
@pytest.mark.parametrize(
    ("version", "published", "constructed"),
    [("0.5.3", False, False), ("0.5.14", False, True), ("0.5.20", True, True)],
)
def test_parallel_state_and_model_build_follow_the_release(
    sglang_release, version, published, constructed
):
    """Server args are published where the release can, else the attention-DP state is
    set up from them; stages are built through the model's ``__init__`` where its
    layers build on CPU."""
    text = render_test_utils(tree_features(detect_tree(sglang_release(version))))
    assert "# @@" not in text
    compile(text, "pp_aux_capture_family_models.py", "exec")
    assert ("runtime_context.publish(server_args" in text) == published
    assert "pipeline_model_parallel_size=world_size" in text  # sizes as arguments
    assert ("name = _tiny_model(module_name, outer_name)" in text) == constructed
    assert ("    name = None\n" in text) == (not constructed)
    dp_state = "initialize_dp_attention(" in text
    assert dp_state == (constructed and not published)
