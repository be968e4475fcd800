"""Guard codemod, and the whole per-file transform, over the caller fixtures."""

from __future__ import annotations

import difflib
import types

import libcst as cst
import pytest
from caller_cases import CASE_IDS, CASES
from libcst.codemod import CodemodContext, CodemodTest
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from codemods.callers.analyse import find_calls
from codemods.callers.records import Action, Status
from codemods.callers.rewrite.guard import GuardCommand
from codemods.callers.transform import TransformOptions, transform_source

POLICIES = ["default", "raise"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fixture_output_is_exact(case, policy):
    result = transform_source(case.before, f"{case.name}/before.py", case.options(policy))
    assert result.status is not Status.FAILED, result.error
    produced = result.rewritten if result.status is Status.CHANGED else case.before
    assert produced.decode() == case.expected(policy).decode()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_second_run_changes_nothing(case, policy):
    expected = case.expected(policy)
    result = transform_source(expected, f"{case.name}/after.py", case.options(policy))
    assert result.status is Status.UNCHANGED, result.error
    assert result.rewritten is None
    assert not any(
        action in (Action.GUARD, Action.FALLBACK)
        for site in result.call_sites
        for action in site.actions
    )


_HEADER_LINES = {"import logging", "logger = logging.getLogger(__name__)", ""}


def _rewritten_lines(source: bytes, options: TransformOptions) -> set[int]:
    """Lines of the statements the codemods rewrite (1-based)."""
    wrapper = MetadataWrapper(cst.parse_module(source))
    positions = wrapper.resolve(PositionProvider)
    parents = wrapper.resolve(ParentNodeProvider)
    lines: set[int] = set()
    for found in find_calls(wrapper, "x.py", options.hooks):
        if {Action.GUARD, Action.FALLBACK} & set(found.site.actions):
            statements = [found.statement or found.call]
            if found.claims is not None and found.claims.tail:  # claims move with the call
                body = list(parents[found.statement].body)
                index = next(i for i, item in enumerate(body) if item is found.statement)
                statements += body[index + 1 : index + 1 + found.claims.tail]
            for statement in statements:
                span = positions[statement]
                lines.update(range(span.start.line, span.end.line + 1))
    return lines


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("case", [c for c in CASES if c.changes], ids=lambda c: c.name)
def test_diff_is_minimal(case, policy):
    """Only the rewritten call statements change; elsewhere only logging setup is added."""
    before = case.before.decode().splitlines()
    after = case.expected(policy).decode().splitlines()
    allowed = _rewritten_lines(case.before, case.options(policy))
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        removed = set(range(i1 + 1, i2 + 1))
        assert removed <= allowed, (tag, before[i1:i2])
        if not removed:  # a pure insertion: logging setup, or next to a rewritten call
            touches_call = {i1, i1 + 1} & allowed
            if not touches_call:
                assert {line.strip() for line in after[j1:j2]} <= _HEADER_LINES, after[j1:j2]


class TestGuardCommand(CodemodTest):
    TRANSFORM = GuardCommand

    def test_skip_policy_wraps_and_normalises(self):
        before = """
            def main(model, args):
                model.set_dspark_layers_to_capture(args.capture_layers)
        """
        after = """
            def main(model, args):
                if args.capture_layers:
                    model.set_dspark_layers_to_capture(list(args.capture_layers))
        """
        self.assertCodemod(before, after)

    def test_raise_policy_names_the_value_and_the_hook(self):
        before = """
            def main(model, args):
                # capture for the draft head
                model.set_dspark_layers_to_capture(args.capture_layers)
        """
        after = """
            def main(model, args):
                # capture for the draft head
                if not args.capture_layers:
                    raise ValueError(
                        "set_dspark_layers_to_capture needs layer ids: args.capture_layers is unset"
                    )
                model.set_dspark_layers_to_capture(list(args.capture_layers))
        """
        self.assertCodemod(before, after, guard_policy="raise")

    def test_or_result_is_guarded_whole(self):
        """``not`` must apply to the whole ``or``: ``not a or b`` would raise for ``a=[]``."""
        before = """
            def main(model, args):
                model.set_dspark_layers_to_capture(args.layers or args.defaults)
        """
        after_skip = """
            def main(model, args):
                if args.layers or args.defaults:
                    model.set_dspark_layers_to_capture(list(args.layers or args.defaults))
        """
        after_raise = """
            def main(model, args):
                if not (args.layers or args.defaults):
                    raise ValueError(
                        "set_dspark_layers_to_capture needs layer ids: args.layers or "
                        "args.defaults is unset"
                    )
                model.set_dspark_layers_to_capture(list(args.layers or args.defaults))
        """
        self.assertCodemod(before, after_skip)
        self.assertCodemod(before, after_raise, guard_policy="raise")

    def test_existing_list_call_is_kept(self):
        before = """
            def main(model, layer_ids=None):
                model.set_msd_layers_to_capture(list(layer_ids))
        """
        after = """
            def main(model, layer_ids=None):
                if layer_ids:
                    model.set_msd_layers_to_capture(list(layer_ids))
        """
        self.assertCodemod(before, after)

    def test_user_added_hook(self):
        before = """
            def main(model, cfg):
                model.set_medusa_layers_to_capture(cfg.heads)
        """
        after = """
            def main(model, cfg):
                if cfg.heads:
                    model.set_medusa_layers_to_capture(list(cfg.heads))
        """
        self.assertCodemod(before, after, extra_hooks=["set_medusa_layers_to_capture"])

    def test_call_sharing_a_line_gets_its_own_line(self):
        before = """
            def f(model, ids=None):
                x = 1; model.set_dspark_layers_to_capture(ids); y = 2  # note
                if x: x = 2; model.set_dspark_layers_to_capture(ids)
        """
        after = """
            def f(model, ids=None):
                x = 1
                if ids:
                    model.set_dspark_layers_to_capture(list(ids))
                y = 2  # note
                if x:
                    x = 2
                    if ids:
                        model.set_dspark_layers_to_capture(list(ids))
        """
        self.assertCodemod(before, after)

    def test_left_alone(self):
        for code in (
            "def f(model):\n    model.set_dspark_layers_to_capture([1, 2])\n",
            "def f(model, ids=None):\n    if ids:\n        model.set_dspark_layers_to_capture(ids)\n",
            "def f(model, ids=None):\n    if ids is not None:\n"
            "        model.set_dspark_layers_to_capture(ids)\n",
            "def f(model, args, ok):\n    if ok and args.layers and hasattr(model, 'x'):\n"
            "        model.set_dspark_layers_to_capture(args.layers)\n",
            "def f(model, ids=None):\n    if not ids:\n        raise ValueError('no')\n"
            "    model.set_dspark_layers_to_capture(ids)\n",
            "def f(model, ids=None):\n    for _ in range(2):\n        if ids is None:\n"
            "            continue\n        model.set_dspark_layers_to_capture(ids)\n",
            "def f(model, ids=None):\n    model.set_eagle3_layers_to_capture(ids)\n",
            "def f(model):\n    model.set_dspark_layers_to_capture(None)\n",
            "def f(model, ids=None):\n    return model.set_dspark_layers_to_capture(ids)\n",
        ):
            with self.subTest(code=code):
                self.assertCodemod(code, code, expected_skip=False)


def _run(source: str, options: TransformOptions, namespace: dict) -> None:
    result = transform_source(source.encode(), "runtime.py", options)
    assert result.status is Status.CHANGED, result.error
    exec(compile(result.rewritten, "runtime.py", "exec"), namespace)


class _RecordingModel:
    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def set_dspark_layers_to_capture(self, layer_ids):
        if layer_ids is None:
            raise ValueError("DSPARK requires explicit layer_ids for aux hidden capture.")
        self.calls.append(layer_ids)


RUNTIME_SOURCE = """
def enable(model, args):
    model.set_dspark_layers_to_capture(args.capture_layers)
"""


def test_guarded_code_skips_the_call_when_ids_are_unset():
    namespace: dict = {}
    _run(RUNTIME_SOURCE, TransformOptions(), namespace)
    model = _RecordingModel()
    namespace["enable"](model, types.SimpleNamespace(capture_layers=None))
    assert model.calls == []
    namespace["enable"](model, types.SimpleNamespace(capture_layers=(3, 18)))
    assert model.calls == [[3, 18]]  # normalised to a list


def test_raise_policy_fails_early_with_a_clear_message():
    namespace: dict = {}
    _run(RUNTIME_SOURCE, TransformOptions(guard_policy="raise"), namespace)
    model = _RecordingModel()
    with pytest.raises(ValueError, match=r"set_dspark_layers_to_capture.*args\.capture_layers"):
        namespace["enable"](model, types.SimpleNamespace(capture_layers=None))
    assert model.calls == []


def test_literal_none_is_left_for_review():
    source = b"def f(model):\n    model.set_dspark_layers_to_capture(None)\n"
    result = transform_source(source, "f.py", TransformOptions())
    assert result.status is Status.UNCHANGED
    (site,) = result.call_sites
    assert site.actions == (Action.REVIEW,)
    assert "None" in site.note
    assert result.review_count == 1


def test_guard_command_runs_on_its_own_context():
    command = GuardCommand(CodemodContext(), guard_policy="skip")
    module = cst.parse_module("def f(m, args):\n    m.set_dflash_layers_to_capture(args.x)\n")
    assert "if args.x:" in command.transform_module(module).code


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError):
        GuardCommand(CodemodContext(), guard_policy="maybe")
    with pytest.raises(ValueError):
        TransformOptions(guard_policy="maybe")
