"""The fallback codemod wraps only calls that can reach a hook raising NotImplementedError.

Checked by running the rewritten fixtures against fake models that behave like the SGLang
setters under pipeline parallelism: DFLASH (Qwen3.5) raises NotImplementedError, EAGLE3 returns
early on non-last ranks and never raises it.
"""

from __future__ import annotations

import logging
import sys
import types

import pytest
from caller_cases import CALLERS

from codemods.callers.records import Action, Risk, Status
from codemods.callers.transform import TransformOptions, scan_source, transform_source

EAGLE3_ONLY = CALLERS / "eagle3_only_no_logging"
MIXED = CALLERS / "eagle3_next_to_dflash"


class PipelineParallelModel:
    """A non-last PP rank of a model with both setters, as in the SGLang releases."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(("eagle3", layer_ids))  # returns early: capture silently lost

    def set_dflash_layers_to_capture(self, layer_ids):
        self.calls.append(("dflash", layer_ids))
        raise NotImplementedError("DFLASH/DSPARK aux hidden capture requires PP=1.")


@pytest.mark.parametrize(
    "options", [TransformOptions(), TransformOptions(guard_policy="raise", fallback_policy="raise")]
)
def test_eagle3_only_module_is_left_byte_identical(options):
    source = (EAGLE3_ONLY / "before.py").read_bytes()
    result = transform_source(source, "eagle3_only.py", options)
    assert result.status is Status.UNCHANGED, result.error
    assert result.rewritten is None
    assert len(result.call_sites) == 3
    for site in result.call_sites:
        assert site.actions == (Action.NONE,), site
        assert Risk.PP_UNSUPPORTED not in site.risks, site


def test_scan_reports_no_pp_risk_for_eagle3_but_does_for_dflash():
    result = scan_source((MIXED / "before.py").read_bytes(), "mixed.py")
    risks = {site.hook: site.risks for site in result.call_sites}
    actions = {site.hook: site.actions for site in result.call_sites}
    assert Risk.PP_UNSUPPORTED not in risks["set_eagle3_layers_to_capture"]
    assert actions["set_eagle3_layers_to_capture"] == (Action.NONE,)
    assert Risk.PP_UNSUPPORTED in risks["set_dflash_layers_to_capture"]
    assert actions["set_dflash_layers_to_capture"] == (Action.FALLBACK,)


def _load(path, monkeypatch) -> types.ModuleType:
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_grad_enabled=id))
    module = types.ModuleType("mixed_capture")
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def test_warn_fixture_runs_eagle3_untouched_and_warns_for_dflash(monkeypatch, caplog):
    module = _load(MIXED / "after.py", monkeypatch)
    model = PipelineParallelModel()
    with caplog.at_level(logging.WARNING, logger="mixed_capture"):
        assert module.enable(model, "eagle3", [1, 2]) == "eagle3"
    assert model.calls == [("eagle3", [1, 2])]
    assert caplog.records == []
    with caplog.at_level(logging.WARNING, logger="mixed_capture"):
        assert module.enable(model, "dflash", [3]) == "dflash"
    assert model.calls[-1] == ("dflash", [3])
    (record,) = caplog.records
    assert "set_dflash_layers_to_capture unavailable" in record.getMessage()
    assert "eagle3" not in record.getMessage()


def test_raise_fixture_reraises_for_dflash_only(monkeypatch):
    module = _load(MIXED / "after_raise.py", monkeypatch)
    model = PipelineParallelModel()
    assert module.enable(model, "eagle3", None) == "eagle3"
    with pytest.raises(NotImplementedError, match="--pp-size 1") as info:
        module.enable(model, "dflash", [3])
    assert "requires PP=1" in str(info.value.__cause__)


def test_dynamic_site_names_only_the_hooks_that_can_raise():
    source = (
        b"import logging\n\nlogger = logging.getLogger(__name__)\n\n\n"
        b"def f(model, name):\n"
        b"    for hook in ('set_eagle3_layers_to_capture', 'set_dspark_layers_to_capture'):\n"
        b"        getattr(model, hook)([1])\n"
    )
    result = transform_source(source, "f.py", TransformOptions())
    assert result.status is Status.CHANGED
    text = result.rewritten.decode()
    assert "except NotImplementedError" in text
    # the warning names the hook called, through the name holding it: only a hook that can
    # raise gets there, never a fixed EAGLE3 name
    assert '"%s unavailable, running without aux hidden capture: %s", hook, exc' in text
    assert "set_eagle3_layers_to_capture unavailable" not in text
    assert "set_eagle3_layers_to_capture / " not in text


def test_user_hooks_are_still_wrapped():
    source = b"def f(model):\n    model.set_medusa_layers_to_capture([1])\n"
    result = transform_source(
        source, "f.py", TransformOptions(extra_hooks=("set_medusa_layers_to_capture",))
    )
    assert result.status is Status.CHANGED
    assert b"except NotImplementedError" in result.rewritten
