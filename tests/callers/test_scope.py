"""Scope: test modules, other engines' modules and calls whose error a test expects."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from codemods.callers.records import SKIP_PREFIX, Action, CallSite, Risk, Shape, is_skipped
from codemods.callers.scope import (
    EXPECTED_ERROR_REASON,
    calls_expecting_errors,
    foreign_keywords,
    is_test_path,
    mark_skipped,
    module_skip_reason,
    other_engine,
    skip_all,
)

HOOKS = ("set_dspark_layers_to_capture", "set_dflash_layers_to_capture",
         "set_eagle3_layers_to_capture", "set_msd_layers_to_capture")  # fmt: skip


def parse(code: str) -> cst.Module:
    return cst.parse_module(textwrap.dedent(code))


@pytest.mark.parametrize(
    "path",
    ["test_capture.py", "pkg/test_x.py", "capture_test.py", "conftest.py", "a/conftest.py",
     "tests/helpers.py", "repo/tests/unit/capture.py", "C:\\repo\\tests\\capture.py"],
)  # fmt: skip
def test_test_paths(path):
    assert is_test_path(path)


@pytest.mark.parametrize(
    "path",
    ["capture.py", "testing_utils.py", "latest.py", "contest.py", "pytest_style_tests.py",
     "test/capture.py", "tests.py", "pkg/attest_x.py", "test_data.txt"],
)  # fmt: skip
def test_not_test_paths(path):
    assert not is_test_path(path)


def test_other_engine_needs_an_engine_import_and_no_sglang():
    assert other_engine(parse("import tokenspeed\n")) == "imports tokenspeed and not sglang"
    assert other_engine(parse("from vllm.model_executor import x\nimport torch\n")) == (
        "imports vllm and not sglang"
    )
    inside = parse("def f():\n    from tokenspeed.models import m\n    return m\n")
    assert other_engine(inside) == "imports tokenspeed and not sglang"
    assert other_engine(parse("import vllm\nimport sglang.srt.models\n")) is None
    assert other_engine(parse("from sglang import x\nfrom tokenspeed import y\n")) is None
    assert other_engine(parse("import torch\nfrom .vllm import x\n")) is None
    assert other_engine(parse("import vllm_helpers\n")) is None


def test_foreign_keywords_only_for_hooks_the_facts_know():
    module = parse("""
        model.set_dflash_layers_to_capture(ids, capture_hc=True)
        model.set_dspark_layers_to_capture(layer_ids=ids)
        model.set_eagle3_layers_to_capture(layers_to_capture=ids)
        getattr(model, "set_eagle3_layers_to_capture")(ids, stage=2)
        model.set_msd_layers_to_capture(capture_hc=False, layer_ids=ids)
        model.set_custom_layers_to_capture(ids, capture_hc=True)
        other.capture(ids, capture_hc=True)
    """)
    assert foreign_keywords(module, HOOKS + ("set_custom_layers_to_capture",)) == (
        ("set_dflash_layers_to_capture", "capture_hc"),
        ("set_eagle3_layers_to_capture", "stage"),
    )
    assert foreign_keywords(module, ("set_dspark_layers_to_capture",)) == ()


def test_module_skip_reason_in_order():
    plain = parse("model.set_dspark_layers_to_capture(ids)\n")
    assert module_skip_reason(plain, "capture.py", HOOKS) is None
    assert module_skip_reason(plain, "tests/capture.py", HOOKS).startswith("test module")
    assert module_skip_reason(plain, "tests/capture.py", HOOKS, include_tests=True) is None
    engine = parse("import tokenspeed\nmodel.set_dspark_layers_to_capture(ids)\n")
    assert module_skip_reason(engine, "test_x.py", HOOKS, include_tests=True) == (
        "not SGLang: imports tokenspeed and not sglang"
    )
    keyword = parse("model.set_dflash_layers_to_capture(ids, capture_hc=True)\n")
    assert module_skip_reason(keyword, "backend.py", HOOKS) == (
        "not SGLang: set_dflash_layers_to_capture(capture_hc=...) is not a keyword of "
        "SGLang's setters"
    )


def _hook_calls(module: cst.Module, calls) -> list[str]:
    return sorted(
        module.code_for_node(call) for call in calls
        if isinstance(call.func, cst.Attribute) and call.func.attr.value.startswith("set_")
    )  # fmt: skip


def test_calls_inside_raises_blocks():
    module = parse("""
        import pytest
        from pytest import raises as expect_raise
        import unittest

        def test_a(model):
            model.set_dspark_layers_to_capture([1])
            with pytest.raises(ValueError, match="explicit"):
                model.set_dspark_layers_to_capture(None)
            with expect_raise(NotImplementedError):
                if True:
                    model.set_dflash_layers_to_capture([2])

        class T(unittest.TestCase):
            def test_b(self):
                with self.assertRaises(ValueError), open("f"):
                    self.model.set_dspark_layers_to_capture(None)
                with self.assertRaisesRegex(ValueError, "x"):
                    self.model.set_msd_layers_to_capture(None)
                with open("f"):
                    self.model.set_dspark_layers_to_capture([3])
    """)
    assert _hook_calls(module, calls_expecting_errors(module)) == [
        "model.set_dflash_layers_to_capture([2])",
        "model.set_dspark_layers_to_capture(None)",
        "self.model.set_dspark_layers_to_capture(None)",
        "self.model.set_msd_layers_to_capture(None)",
    ]


def test_raises_of_something_else_is_not_a_raises_block():
    module = parse("""
        def f(model, checker):
            with checker.raises(ValueError):
                model.set_dspark_layers_to_capture(None)
            with raises(ValueError):
                model.set_dspark_layers_to_capture(None)
    """)
    assert calls_expecting_errors(module) == frozenset()


def _site(note: str = "", actions=(Action.GUARD, Action.FALLBACK)) -> CallSite:
    return CallSite("x.py", 3, 5, "set_dspark_layers_to_capture", Shape.DIRECT, "ids",
                    (Risk.MAYBE_NONE, Risk.PP_UNSUPPORTED), False, False, actions, note)  # fmt: skip


def test_marking_keeps_the_risks_and_says_why():
    site = mark_skipped(_site("bind them first"), EXPECTED_ERROR_REASON)
    assert site.actions == (Action.NONE,)
    assert site.risks == (Risk.MAYBE_NONE, Risk.PP_UNSUPPORTED)
    assert site.note == SKIP_PREFIX + EXPECTED_ERROR_REASON
    assert is_skipped(site)
    assert not is_skipped(_site())
    assert not is_skipped(_site(SKIP_PREFIX + "x", actions=(Action.REVIEW,)))
    assert skip_all([_site()], None) == (_site(),)
    assert [s.note for s in skip_all([_site(), _site()], "why")] == [SKIP_PREFIX + "why"] * 2
