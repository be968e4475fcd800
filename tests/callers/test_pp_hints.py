"""Hints point only to fixes that exist: ``auxcap upstream-patch`` is named for a
``NotImplementedError`` under PP only where that patch removes it (DSPARK: Kimi-Linear and
Kimi-K3), never for DFLASH (``qwen3_5_text`` raises, and the patch leaves it alone) or a
hook the release facts do not know."""

from __future__ import annotations

import pytest

from codemods.callers.transform import TransformOptions, transform_source
from codemods.catalog import hook_facts, pp_raise
from codemods.upstream.family.plan import OWNED_ELSEWHERE

DSPARK = "set_dspark_layers_to_capture"
DFLASH = "set_dflash_layers_to_capture"


def test_dspark_is_fixed_upstream_for_the_kimi_models_only():
    assert pp_raise.upstream_fixes(DSPARK) == ("Kimi-K3", "Kimi-Linear")
    files = {facts.file for facts in hook_facts.pp_raises(DSPARK, None, "NotImplementedError")}
    assert files == {"kimi_linear.py", "kimi_k3.py"}


def test_dflash_raises_in_a_file_the_patch_does_not_rewrite():
    files = {facts.file for facts in hook_facts.pp_raises(DFLASH, None, "NotImplementedError")}
    assert "qwen3_5_text.py" in files and not files <= set(pp_raise.UPSTREAM_REWRITES)
    assert pp_raise.upstream_fixes(DFLASH) == ()
    assert pp_raise.pp_hint([DFLASH]) == "run with --pp-size 1"


def test_the_hint_follows_the_facts(monkeypatch):
    """Not a list of hook names: a hook whose raising setters all sit in rewritten files
    gets the upstream hint, whatever its name."""
    monkeypatch.setitem(pp_raise.UPSTREAM_REWRITES, "qwen3_5_text.py", "Qwen3.5")
    assert pp_raise.upstream_fixes(DFLASH) == ("Qwen3.5",)
    assert pp_raise.pp_hint([DFLASH]) == pp_raise.UPSTREAM_HINT


@pytest.mark.parametrize(
    ("hooks", "upstream"),
    [
        ([DSPARK], True),
        ([DFLASH], False),
        ([DSPARK, DFLASH], False),
        (["set_my_capture"], False),
        ([], False),
    ],
)
def test_pp_hint(hooks, upstream):
    hint = pp_raise.pp_hint(hooks)
    assert hint.startswith("run with --pp-size 1")
    assert ("upstream-patch" in hint) is upstream


def test_the_upstream_rewriters_own_exactly_those_files():
    assert set(OWNED_ELSEWHERE) == set(pp_raise.UPSTREAM_REWRITES)


def _raise_message(hook: str) -> str:
    source = f"def f(model):\n    model.{hook}([3, 18])\n"
    options = TransformOptions(fallback_policy="raise")
    result = transform_source(source.encode(), "f.py", options)
    assert result.rewritten is not None, result.error
    return result.rewritten.decode()


def test_fallback_raise_message_for_dflash_does_not_send_users_to_the_upstream_patch():
    text = _raise_message(DFLASH)
    assert "--pp-size 1" in text and "upstream" not in text


def test_fallback_raise_message_for_dspark_names_the_upstream_patch():
    assert "auxcap upstream-patch" in _raise_message(DSPARK)


def test_capture_required_dflash_site_left_alone_says_pp_size_only():
    from codemods.callers.transform import scan_source

    source = (
        "class DraftModelRunner:\n"
        "    def init(self, model, ids):\n"
        "        if self.dflash_use_aux_hidden_state:\n"
        "            model.set_dflash_layers_to_capture(ids)\n"
    )
    result = scan_source(source.encode(), "runner.py", TransformOptions())
    (site,) = result.call_sites
    assert "capture required" in site.note
    assert site.note.endswith("left as is (under PP: run with --pp-size 1)"), site.note
