"""Where the runner configures a DSPARK target's capture through the DFLASH hook.

0.5.16+'s ``configure_aux_hidden_state_capture`` calls ``set_dflash_layers_to_capture`` on a
DSPARK target without ``set_dspark_layers_to_capture``; that is how the server reaches the
patched DFLASH hooks on 0.5.21-0.5.23, which refuse DFLASH itself with PP.  The finder names
that call on the real releases, and nothing where the DFLASH call is not the DSPARK test's
fallback.
"""

from __future__ import annotations

import pytest
from sglang_support.env import sglang_tree

from codemods.upstream.tree.reachability import _fallback_in, dspark_dflash_fallback
from codemods.upstream.tree.sglang_tree import detect_tree

SETUP = "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py"


@pytest.mark.sglang
@pytest.mark.parametrize("version", ("0.5.16", "0.5.21", "0.5.23"))
def test_the_release_fallback_is_found(version):
    tree = detect_tree(sglang_tree(version))
    found = dspark_dflash_fallback(tree)
    assert found is not None and (found.path, found.function) == (
        SETUP,
        "configure_aux_hidden_state_capture",
    ), found
    line = tree.read_text(found.path).splitlines()[found.line - 1]
    assert "model.set_dflash_layers_to_capture(" in line, line


def test_a_dflash_call_that_is_not_the_dspark_fallback_is_not_one():
    separate = """\
def configure(model, is_dspark, dflash, ids):
    if is_dspark and hasattr(model, "set_dspark_layers_to_capture"):
        model.set_dspark_layers_to_capture(ids)
    if dflash:
        model.set_dflash_layers_to_capture(ids)
"""
    assert _fallback_in(separate, "x.py") is None
    fallback = separate.replace("    if dflash:", "    elif dflash:")
    found = _fallback_in(fallback, "x.py")
    assert found is not None and (found.line, found.function) == (5, "configure")
