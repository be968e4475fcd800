"""Capture required or optional, from evidence across the module
(:mod:`codemods.callers.analyse.evidence`): a loop that raises once no hook was called, an
assert on the ids, captures read back in the class or module, extraction code; and where the
signs conflict, the call is left loud and reported for review.

The fixtures are run before and after the rewrite against fake models whose hooks behave like
SGLang's (DSPARK / DFLASH reject ``None`` with ``ValueError`` and raise
``NotImplementedError`` under PP).
"""

from __future__ import annotations

import types

import pytest
from test_capture_required import CALLERS, POLICIES, FakeModel, _module

from codemods.callers.analyse.required import REQUIRED_PREFIX
from codemods.callers.records import Action, Status, is_skipped
from codemods.callers.transform import scan_source, transform_source

REQUIRED_CASES = {
    "required_hook_table_loop": "the code raises when no hook was called",
    "required_extraction_loop": "the code raises when no hook was called",
    "required_class_reads": "the captures are read back",
    "required_assert_ids": "the code asserts on the layer ids",
}


class Eagle3Only:
    def __init__(self) -> None:
        self.calls = []

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(("eagle3", layer_ids))


class Bare:
    """A model without capture hooks."""


@pytest.mark.parametrize("case", sorted(REQUIRED_CASES))
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_required_cases_get_no_skip_and_no_fallback(case, policy):
    before = (CALLERS / case / "before.py").read_bytes()
    result = transform_source(before, f"{case}/before.py", POLICIES[policy])
    assert result.status is not Status.FAILED, result.error
    after = result.rewritten if result.status is Status.CHANGED else before
    assert after == (CALLERS / case / "after.py").read_bytes()  # the same under both policies
    assert b"except NotImplementedError" not in after
    assert b"if layer_ids or" not in after  # no skip
    (site,) = result.call_sites
    assert Action.FALLBACK not in site.actions
    assert REQUIRED_PREFIX in site.note and REQUIRED_CASES[case] in site.note, site.note
    again = transform_source(after, f"{case}/after.py", POLICIES[policy])
    assert again.status is Status.UNCHANGED


def test_hook_table_loop_stays_loud_and_fails_early_on_unset_ids():
    before = _module("required_hook_table_loop", "before.py")
    after = _module("required_hook_table_loop", "after.py")
    for module in (before, after):
        with pytest.raises(NotImplementedError, match="PP=1"):
            module.install_capture(FakeModel(pp_size=2), [3, 7])
        with pytest.raises(RuntimeError, match="no capture setter"):
            module.install_capture(Bare(), [3])
        model = FakeModel()
        module.install_capture(model, (1, 2))
        assert model.calls == [("dspark", [1, 2])]
        eagle3 = Eagle3Only()
        module.install_capture(eagle3, None)  # EAGLE3's None: default layers, still passed
        assert eagle3.calls == [("eagle3", None)]
    with pytest.raises(ValueError, match="requires explicit layer_ids"):
        before.install_capture(FakeModel(), None)
    with pytest.raises(ValueError, match="layer_ids is unset"):
        after.install_capture(FakeModel(), None)


def test_extraction_loop_class_reads_and_assert_keep_pp_errors():
    extraction = _module("required_extraction_loop", "after.py")
    with pytest.raises(NotImplementedError):
        extraction.attach_capture(FakeModel(pp_size=2), [1, 2])
    taps = _module("required_class_reads", "after.py")
    with pytest.raises(NotImplementedError):
        taps.FeatureTap(FakeModel(pp_size=2), [4])
    asserting = _module("required_assert_ids", "after.py")
    with pytest.raises(NotImplementedError):
        asserting.prepare(FakeModel(pp_size=2), {"aux_layers": [1]})
    with pytest.raises(AssertionError, match="not resolved"):
        asserting.prepare(FakeModel(), {})


def test_conflicting_signs_are_left_loud_for_review():
    before = (CALLERS / "conflicting_signs" / "before.py").read_bytes()
    assert (CALLERS / "conflicting_signs" / "after.py").read_bytes() == before
    for options in POLICIES.values():
        result = transform_source(before, "conflicting_signs/before.py", options)
        assert result.status is Status.UNCHANGED
        (site,) = result.call_sites
        assert site.actions == (Action.REVIEW,)
        assert site.note.startswith("conflicting signs: " + REQUIRED_PREFIX)
        assert "captures are read back" in site.note and "hasattr/callable check" in site.note


# ------------------------------------------------------------------------ detection rules
def _site(source: str, path: str = "x.py"):
    result = scan_source(source.encode(), path, prefilter=False)
    assert result.status is Status.UNCHANGED, result.error
    (site,) = result.call_sites
    return site


def _rewritten(site) -> bool:
    return Action.FALLBACK in site.actions and not site.note


CALL = "model.set_dspark_layers_to_capture(ids)"


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            f"def f(model, ids):\n    for n in (1, 2):\n        {CALL}\n        return\n"
            "    raise RuntimeError('none')\n",
            "raises when no hook was called",
        ),
        (
            f"def f(model, ids):\n    done = None\n    for n in (1, 2):\n        {CALL}\n"
            "        done = n\n        break\n    if done is None:\n        raise RuntimeError()\n",
            "raises when no hook was called",
        ),
        (
            f"def f(model, ids):\n    for n in (1, 2):\n        {CALL}\n        break\n"
            "    else:\n        raise RuntimeError('none')\n",
            "raises when no hook was called",
        ),
        (
            f"def f(model, ids):\n    assert ids, 'unresolved'\n    {CALL}\n",
            "asserts on the layer ids",
        ),
        (
            f"def f(model, ids):\n    {CALL}\n\n\ndef g(model):\n    return model.layers_to_capture\n",
            "read back",
        ),
        (
            f"class A:\n    def f(self, model, ids):\n        {CALL}\n\n"
            "    def g(self, out):\n        return out.hidden_states\n",
            "read back",
        ),
        (f"def f(model, ids):\n    {CALL}\n", "extraction code (the module)"),
        (
            f"class FeatureExtractor:\n    def f(self, model, ids):\n        {CALL}\n",
            "extraction code (class FeatureExtractor)",
        ),
    ],
)
def test_each_evidence_marks_the_call_required(source, reason):
    path = "tools/extract_features.py" if "the module" in reason else "x.py"
    site = _site(source, path)
    assert is_skipped(site) and REQUIRED_PREFIX in site.note and reason in site.note


@pytest.mark.parametrize(
    "source",
    [
        # a read in another class, a write, a loop that goes on after it, nothing at all
        f"class A:\n    def f(self, model, ids):\n        {CALL}\n\n\n"
        "class B:\n    def g(self, out):\n        return out.hidden_states\n",
        f"def f(model, ids):\n    {CALL}\n    model.layers_to_capture = ids\n",
        f"def f(model, ids):\n    for n in (1, 2):\n        {CALL}\n        return\n"
        "    print('none')\n",
        f"def f(model, ids):\n    {CALL}\n",
        # a loop without return/break raises whatever it called
        f"def f(model, ids):\n    for n in (1, 2):\n        {CALL}\n    raise RuntimeError()\n",
    ],
)
def test_no_evidence_keeps_the_fallback(source):
    assert _rewritten(_site(source))


@pytest.mark.parametrize(
    "optional, sign",
    [
        (
            f"if hasattr(model, 'set_dspark_layers_to_capture'):\n        {CALL}\n",
            "hasattr/callable",
        ),
        (f"try:\n        {CALL}\n    except AttributeError:\n        pass\n", "handler"),
        (f"{CALL}\n    return True\n\n\ndef g():\n    return False\n", None),
        (f"{CALL}\n    if not ids:\n        return False\n", "reports capture off"),
    ],
)
def test_optional_evidence_with_required_evidence_is_a_conflict(optional, sign):
    source = (
        f"def f(model, ids):\n    {optional}\n\ndef g(out):\n    return out.aux_hidden_states\n"
    )
    site = _site(source)
    if sign is None:  # a return False in another function reports nothing about this call
        assert is_skipped(site)
        return
    assert site.actions == (Action.REVIEW,) and sign in site.note, site.note


def test_tuple_table_loop_is_found():
    source = (
        "TABLE = (('set_dflash_layers_to_capture', 'a'), ('set_dspark_layers_to_capture', 'b'))\n"
        "def f(model, ids):\n    for name, label in TABLE:\n        getattr(model, name)(ids)\n"
    )
    site = _site(source)
    assert site.hook == "set_dflash_layers_to_capture|set_dspark_layers_to_capture"
    assert _rewritten(site)


def test_evidence_fixtures_behave_as_before_where_left_alone():
    module = _module("required_extraction_loop", "after.py")
    model = FakeModel()
    model.model = types.SimpleNamespace(layers_to_capture=[1, 2])
    assert module.attach_capture(model, [2, 1]) == "set_dspark_layers_to_capture"


@pytest.mark.parametrize(
    "loop",
    [
        "for entry in TABLE:\n        getattr(model, entry[1])(ids)",
        "for i, (method, name) in enumerate(TABLE):\n        getattr(model, name)(ids)",
        "for method, name, *rest in TABLE:\n        getattr(model, name)(ids)",
        "for method, (name, width) in BY_METHOD.items():\n        getattr(model, name)(ids)",
        "for method, name in PLAIN.items():\n        getattr(model, name)(ids)",
    ],
)
def test_hook_tables_unpacked_in_loops_are_found(loop):
    source = (
        "TABLE = (('dflash', 'set_dflash_layers_to_capture', 1),"
        " ('dspark', 'set_dspark_layers_to_capture', 2))\n"
        "BY_METHOD = {'dflash': ('set_dflash_layers_to_capture', 1),"
        " 'dspark': ('set_dspark_layers_to_capture', 2)}\n"
        "PLAIN = {'dflash': 'set_dflash_layers_to_capture', 'dspark': 'set_dspark_layers_to_capture'}\n"
        f"def f(model, ids):\n    {loop}\n"
    )
    site = _site(source)
    assert site.hook == "set_dflash_layers_to_capture|set_dspark_layers_to_capture"
