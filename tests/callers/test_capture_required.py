"""Capture required: where the code needs the capture, no rewrite may let it go on silently.

The fixtures are run before and after the rewrite against fake models whose hooks behave like
SGLang's (DSPARK / DFLASH reject ``None`` with ``ValueError`` and raise
``NotImplementedError`` under PP); both policies are checked by running the code.
"""

from __future__ import annotations

import logging
import types
from pathlib import Path

import libcst as cst
import pytest

from codemods.callers.analyse.required import REQUIRED_PREFIX, binding_name, is_serving_path
from codemods.callers.options import TransformOptions
from codemods.callers.records import Action, Status, is_skipped
from codemods.callers.transform import scan_source, transform_source

CALLERS = Path(__file__).resolve().parents[2] / "fixtures" / "callers"
POLICIES = {
    "default": TransformOptions(),
    "raise": TransformOptions(guard_policy="raise", fallback_policy="raise"),
}


class FakeModel:
    """Capture hooks that behave like SGLang's at ``pp_size``; records what they were given."""

    def __init__(self, pp_size: int = 1) -> None:
        self.pp_size = pp_size
        self.calls: list[tuple[str, list[int]]] = []
        self.capture_aux_hidden_states = False

    def _set(self, kind: str, layer_ids) -> None:
        if layer_ids is None:
            raise ValueError(f"{kind.upper()} requires explicit layer_ids for aux hidden capture.")
        if self.pp_size > 1:
            raise NotImplementedError(f"{kind.upper()} aux hidden capture requires PP=1.")
        self.calls.append((kind, list(layer_ids)))
        self.capture_aux_hidden_states = True

    def set_dspark_layers_to_capture(self, layer_ids):
        self._set("dspark", layer_ids)

    def set_dflash_layers_to_capture(self, layer_ids):
        self._set("dflash", layer_ids)

    def __call__(self, batch):
        return batch, [batch] if self.capture_aux_hidden_states else None


class SpecAlgorithm:
    def __init__(self, name: str) -> None:
        self.name = name

    def is_dflash(self) -> bool:
        return self.name == "dflash"

    def is_dspark(self) -> bool:
        return self.name == "dspark"


def _module(case: str, name: str) -> types.ModuleType:
    code = (CALLERS / case / name).read_bytes()
    module = types.ModuleType(f"{case}_{name[:-3]}")
    exec(compile(code, f"{case}/{name}", "exec"), module.__dict__)
    return module


def _versions(case: str) -> list[types.ModuleType]:
    """The rewritten fixture under each policy (after_raise.py only where it differs)."""
    names = ["after.py"]
    if (CALLERS / case / "after_raise.py").exists():
        names.append("after_raise.py")
    return [_module(case, name) for name in names]


# ------------------------------------------------------------------------ the fixtures
@pytest.mark.parametrize(
    "case",
    [
        "capture_required_flag",
        "capture_required_assert",
        "capture_required_runner",
        "hasattr_raise",
    ],
)
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_skip_and_no_fallback_where_capture_is_required(case, policy):
    before = (CALLERS / case / "before.py").read_bytes()
    result = transform_source(before, f"{case}/before.py", POLICIES[policy])
    assert result.status is not Status.FAILED, result.error
    after = result.rewritten if result.status is Status.CHANGED else before
    assert after == (CALLERS / case / "after.py").read_bytes()  # the same under both policies
    assert b"except NotImplementedError" not in after
    for site in result.call_sites:
        assert Action.FALLBACK not in site.actions
        assert REQUIRED_PREFIX in site.note, site
    again = transform_source(after, f"{case}/after.py", POLICIES[policy])
    assert again.status is Status.UNCHANGED


def test_flag_fixture_fails_early_naming_the_value_and_keeps_pp_errors():
    (after,) = _versions("capture_required_flag")
    args = types.SimpleNamespace(dflash_layer_ids=None)
    model = FakeModel()
    worker = after.DraftWorker(model, args, SpecAlgorithm("dflash"))
    with pytest.raises(ValueError, match="self.server_args.dflash_layer_ids is unset"):
        worker.init_aux_capture()
    with pytest.raises(ValueError, match="layer_ids is unset"):
        after.DraftWorker(model, args, SpecAlgorithm("dspark")).init_dspark_capture(None)
    # Flag off: nothing is asked, nothing fails (as before the rewrite).
    after.DraftWorker(model, args, SpecAlgorithm("eagle3")).init_aux_capture()
    assert model.calls == []
    args.dflash_layer_ids = (4, 9)
    after.DraftWorker(model, args, SpecAlgorithm("dflash")).init_aux_capture()
    assert model.calls == [("dflash", [4, 9])]
    # Under PP the hook's error still stops the server.
    with pytest.raises(NotImplementedError, match="PP=1"):
        after.DraftWorker(FakeModel(pp_size=2), args, SpecAlgorithm("dflash")).init_aux_capture()


def test_assert_fixture_never_reaches_the_assert_without_capture():
    (after,) = _versions("capture_required_assert")
    before = _module("capture_required_assert", "before.py")
    with pytest.raises(ValueError, match="requires explicit layer_ids"):
        before.prepare_target(FakeModel(), None)
    with pytest.raises(ValueError, match="aux_layer_ids is unset"):
        after.prepare_target(FakeModel(), None)
    assert after.prepare_target(FakeModel(), [2]).calls == [("dspark", [2])]
    with pytest.raises(NotImplementedError):
        after.prepare_target(FakeModel(pp_size=2), [2])
    with pytest.raises(ValueError, match="cfg.layers is unset"):
        after.forward_with_aux(FakeModel(), 1, types.SimpleNamespace(layers=None))
    assert after.forward_with_aux(FakeModel(), 1, types.SimpleNamespace(layers=[0])) == (1, [1])
    with pytest.raises(NotImplementedError):
        after.forward_with_aux(FakeModel(pp_size=2), 1, types.SimpleNamespace(layers=[0]))


def test_runner_fixture_keeps_every_loud_failure():
    (after,) = _versions("capture_required_runner")
    runner = after.TpModelRunner(FakeModel(), None)
    with pytest.raises(ValueError, match="layer_ids is unset"):
        runner.setup_capture(None)
    with pytest.raises(NotImplementedError):
        after.TpModelRunner(FakeModel(pp_size=2), None).setup_capture([1])
    with pytest.raises(NotImplementedError):  # untouched: the hasattr chain raises on its own
        after.configure_capture(
            model=FakeModel(pp_size=2), use_dflash=True, target_layer_ids=[1], is_dspark=True
        )
    with pytest.raises(ValueError, match="layer_ids is unset"):
        after.lookup_capture(FakeModel(), None)
    with pytest.raises(NotImplementedError):
        after.lookup_capture(FakeModel(pp_size=2), [5])


def test_real_shaped_runner_call_is_reported_with_its_reasons():
    source = (CALLERS / "capture_required_runner" / "before.py").read_bytes()
    sites = scan_source(source, "srv/runner.py").call_sites
    chain = [site for site in sites if site.line in (15, 17)]
    assert len(chain) == 2
    for site in chain:
        assert is_skipped(site)
        assert "the code raises when the model has no hook" in site.note
        assert "under PP: run with --pp-size 1" in site.note
    # The upstream patch removes DSPARK's NotImplementedError (Kimi), not DFLASH's (qwen3_5_text).
    by_hook = {site.hook: site.note for site in chain}
    assert "auxcap upstream-patch" in by_hook["set_dspark_layers_to_capture"]
    assert "upstream" not in by_hook["set_dflash_layers_to_capture"]


# ------------------------------------------------------------------------ detection rules
def _actions(source: str, path: str = "x.py"):
    result = scan_source(source.encode(), path, prefilter=False)
    assert result.status is Status.UNCHANGED, result.error
    return [(site.actions, site.note) for site in result.call_sites]


OPTIONAL = "def f(model, ids=None):\n    {body}\n"


@pytest.mark.parametrize(
    "body, reason",
    [
        (
            "model.set_dspark_layers_to_capture(ids)\n    assert model.capture_aux_hidden_states",
            "read after the call",
        ),
        (
            "model.set_dflash_layers_to_capture(ids)\n    return model(1).aux_hidden_states",
            "read after the call",
        ),
        (
            "if self.eagle_use_aux_hidden_state:\n        model.set_dflash_layers_to_capture(ids)",
            "feature flag",
        ),
        (
            "if not cfg.dflash_use_aux_hidden_state:\n        return\n"
            "    model.set_dflash_layers_to_capture(ids)",
            "feature flag",
        ),
        (
            "if args.spec_algorithm.is_dspark():\n        model.set_dspark_layers_to_capture(ids)",
            "feature flag",
        ),
        (
            "if not hasattr(model, 'set_dspark_layers_to_capture'):\n        raise TypeError('x')\n"
            "    model.set_dspark_layers_to_capture(ids)",
            "no hook",
        ),
    ],
)
def test_each_rule_marks_the_call_required(body, reason):
    ((actions, note),) = _actions(OPTIONAL.format(body=body))
    assert actions == (Action.GUARD,) and note.startswith(REQUIRED_PREFIX) and reason in note


@pytest.mark.parametrize(
    "body",
    [
        # the flag is off in this branch, the read comes before the call, a write is no read
        "if not self.dflash_use_aux_hidden_state:\n        model.set_dflash_layers_to_capture(ids)",
        "assert model.capture_aux_hidden_states is False\n"
        "    model.set_dflash_layers_to_capture(ids)",
        "model.set_dflash_layers_to_capture(ids)\n    model.capture_aux_hidden_states = True",
        "if hasattr(model, 'set_dflash_layers_to_capture'):\n"
        "        model.set_dflash_layers_to_capture(ids)",
        # a lookup of another attribute that raises is no hook lookup
        "if not hasattr(model, 'config'):\n        raise TypeError('x')\n"
        "    model.set_dflash_layers_to_capture(ids)",
    ],
)
def test_optional_capture_is_still_guarded_and_falls_back(body):
    ((actions, note),) = _actions(OPTIONAL.format(body=body))
    assert actions == (Action.GUARD, Action.FALLBACK) and not note


def test_serving_code_by_path_and_class():
    assert is_serving_path("sglang/srt/model_executor/model_runner_components/x.py")
    assert is_serving_path("fork/model_runner_kv.py")
    assert not is_serving_path("specforge/modeling/target/capture.py")
    ((actions, note),) = _actions(
        OPTIONAL.format(body="model.set_dflash_layers_to_capture(ids)"),
        "python/sglang/srt/model_executor/model_runner.py",
    )
    assert actions == (Action.GUARD,) and "serving code" in note
    source = (
        "class HybridModelRunner:\n    def f(self, ids=None):\n"
        "        self.model.set_dspark_layers_to_capture(ids)\n"
    )
    ((actions, note),) = _actions(source)
    assert actions == (Action.GUARD,) and "class HybridModelRunner" in note
    source = "class Runner:\n    def f(self, ids):\n        self.model.set_dspark_layers_to_capture(ids)\n"
    ((actions, note),) = _actions(source, "srt/model_executor/cuda_graph_runner.py")
    assert actions == (Action.NONE,) and is_skipped_note(note)


def is_skipped_note(note: str) -> bool:
    return note.startswith("not rewritten: " + REQUIRED_PREFIX) and "--pp-size 1" in note


# ------------------------------------------------------------------------ inline expressions
def test_inline_expression_is_bound_then_guarded(caplog):
    case = "inline_unset_expression"
    after, after_raise = _versions(case)
    before = _module(case, "before.py")
    with pytest.raises(ValueError):
        before.enable_capture(FakeModel(), {})
    model = FakeModel()
    after.enable_capture(model, {})  # capture optional: skipped
    after.enable_from_args(model, types.SimpleNamespace())
    assert model.calls == []
    after.enable_capture(model, {"layers": (1, 2)})
    after.enable_from_args(model, types.SimpleNamespace(capture_layer_ids=[3]))
    assert model.calls == [("dspark", [1, 2]), ("dflash", [3])]
    with caplog.at_level(logging.WARNING):
        after.enable_capture(FakeModel(pp_size=2), {"layers": [1]})
    assert "running without aux hidden capture" in caplog.text
    with pytest.raises(ValueError, match=r'cfg.get\("layers"\) is unset'):
        after_raise.enable_capture(FakeModel(), {})


def test_binding_name_avoids_names_in_use_keywords_and_builtins():
    expr = cst.parse_expression('cfg.get("layers")')
    assert binding_name(expr, ()) == "layers"
    assert binding_name(expr, {"layers", "layers_2"}) == "layers_3"
    assert binding_name(cst.parse_expression('cfg["list"]'), ()) == "layer_ids"
    assert binding_name(cst.parse_expression("load()"), {"layer_ids"}) == "layer_ids_2"
    assert binding_name(cst.parse_expression('getattr(a, "ids", None)'), ()) == "ids"
