"""A fallback leaves the program consistent (:mod:`codemods.callers.analyse.claims`): after a
skipped or failed capture, the statements that claim capture (a flag set true, ``return
True``, the hook's name kept) do not run and the failure path reports capture off; the
warning names the hook that was called.

The rewritten fixtures (and the bundled demo, migrated in a copy) run against fake models
whose hooks behave like SGLang's: DSPARK / DFLASH reject ``None`` and raise
``NotImplementedError`` under PP; EAGLE3 takes ``None`` (default layers) and never raises.
"""

from __future__ import annotations

import logging
import shutil
import sys
import types
from pathlib import Path

import pytest
from test_capture_required import FakeModel, _module

from codemods.callers.options import TransformOptions
from codemods.callers.records import Status
from codemods.callers.transform import transform_source

ROOT = Path(__file__).resolve().parents[2]


class Eagle3Model(FakeModel):
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.calls.append(("eagle3", layer_ids))


def _warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


def test_hook_table_reports_capture_off_and_names_the_hook(caplog):
    module = _module("specforge_hook_table", "after.py")
    with caplog.at_level(logging.WARNING):
        assert module.OfflineCaptureBackend(FakeModel(pp_size=2), "dspark").enable([1]) is False
    assert _warnings(caplog) == [
        "set_dspark_layers_to_capture unavailable, running without aux hidden capture: "
        "DSPARK aux hidden capture requires PP=1."
    ]
    assert module.OfflineCaptureBackend(FakeModel(), "dspark").enable(None) is False
    assert module.OfflineCaptureBackend(FakeModel(), "dspark").enable([2]) is True
    eagle3 = Eagle3Model()
    assert module.OfflineCaptureBackend(eagle3, "eagle3").enable(None) is True
    assert eagle3.calls == [("eagle3", None)]


def test_flag_after_the_call_is_set_only_when_capture_was_set(caplog):
    path = ROOT / "fixtures" / "callers" / "receiver_chain" / "after.py"
    module = types.ModuleType("receiver_chain_after")
    sys.modules[module.__name__] = module  # (dataclasses look their module up)
    try:
        exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    args = module.CaptureServerArgs("m", dspark_capture_layers=[3])
    for model, expected in ((FakeModel(pp_size=2), False), (FakeModel(), True)):
        runner = types.SimpleNamespace(model=model, capture_enabled=None)
        module.DraftTrainingRunner(runner, args).enable_capture()
        assert runner.capture_enabled is expected
    runner = types.SimpleNamespace(model=FakeModel(), capture_enabled=True)
    module.DraftTrainingRunner(runner, module.CaptureServerArgs("m")).enable_capture()
    assert runner.capture_enabled is False and runner.model.calls == []


def test_claims_fixture(caplog):
    module = _module("optional_capture_claims", "after.py")
    with caplog.at_level(logging.WARNING):
        assert module.enable_first(FakeModel(pp_size=2), [1]) is None
        assert module.enable_flag(FakeModel(pp_size=2), [1]) is False
        assert module.enable_by_name(FakeModel(pp_size=2), "dflash", [1]) is False
    assert [message.split(" ")[0] for message in _warnings(caplog)] == [
        "set_dspark_layers_to_capture",  # the first hook tried, by the name holding it
        "set_dflash_layers_to_capture",
        "set_dflash_layers_to_capture",  # the hook picked by method, not the other one
    ]
    assert module.enable_first(FakeModel(), None) is None
    assert module.enable_first(FakeModel(), [4]) == "set_dspark_layers_to_capture"
    assert module.enable_flag(FakeModel(), [1]) is True
    assert module.enable_by_name(FakeModel(), "dspark", [1]) is True
    before = _module("optional_capture_claims", "before.py")
    with pytest.raises(NotImplementedError):
        before.enable_flag(FakeModel(pp_size=2), [1])


def test_hasattr_else_goes_on_without_capture(caplog):
    module = _module("optional_hasattr_else", "after.py")
    model = FakeModel(pp_size=2)
    with caplog.at_level(logging.WARNING):
        assert module.try_capture(model, [1]) is model
    assert "set_dflash_layers_to_capture unavailable" in caplog.text
    assert module.try_capture(FakeModel(), None).calls == []


@pytest.fixture
def migrated_demo(tmp_path):
    demo = tmp_path / "demo_repo"
    shutil.copytree(ROOT / "fixtures" / "demo_repo", demo)
    for path in (demo / "utils" / "capture.py", demo / "serving" / "capture_runner.py"):
        result = transform_source(path.read_bytes(), str(path), TransformOptions())
        assert result.status is Status.CHANGED, result.error
        path.write_bytes(result.rewritten)
    sys.path.insert(0, str(demo))
    try:
        yield demo
    finally:
        sys.path.remove(str(demo))
        for name in ("config", "utils", "utils.capture", "serving", "serving.capture_runner"):
            sys.modules.pop(name, None)


def _load(path: Path) -> types.ModuleType:
    module = types.ModuleType(path.stem)
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


def test_demo_capture_utility_reports_capture_off(migrated_demo, caplog):
    capture = _load(migrated_demo / "utils" / "capture.py")
    with caplog.at_level(logging.WARNING):
        assert capture.enable_capture(FakeModel(pp_size=2), "dspark", [1]) is False
    assert _warnings(caplog)[0].startswith("set_dspark_layers_to_capture unavailable")
    assert capture.enable_capture(FakeModel(), "dspark", None) is False
    assert capture.enable_capture(FakeModel(), "dspark", [1]) is True
    eagle3 = Eagle3Model(pp_size=2)
    assert capture.enable_capture(eagle3, "eagle3", None) is True
    assert eagle3.calls == [("eagle3", None)]


def test_demo_capture_runner_flag_follows_the_capture(migrated_demo):
    runner_module = _load(migrated_demo / "serving" / "capture_runner.py")
    config = sys.modules["config"] if "config" in sys.modules else None
    assert config is not None
    cases = [
        (FakeModel(pp_size=2), [1], False),
        (FakeModel(), None, False),
        (FakeModel(), [1], True),
    ]
    for model, layers, expected in cases:
        model_runner = types.SimpleNamespace(model=model, capture_enabled=None)
        settings = config.DistillConfig("m", method="dspark", capture_layers=layers)
        runner_module.CaptureRunner(model_runner, settings).enable()
        assert model_runner.capture_enabled is expected


def test_readme_example_is_what_migrate_writes():
    import re

    from readme_blocks import _section

    text = "\n".join(_section("After a fallback, the program says capture is off")) + "\n"
    before, after = re.findall(r"```python\n(.*?)```", text, re.S)[:2]
    result = transform_source(before.encode(), "capture.py", TransformOptions())
    assert result.status is Status.CHANGED, result.error
    assert result.rewritten.decode() == after


def test_other_switches_after_the_call_are_no_claims():
    head = (
        "import logging\nlogger = logging.getLogger(__name__)\n\n\n"
        "def f(model, torch):\n    model.set_dspark_layers_to_capture([1])\n"
        "    torch.backends.cudnn.benchmark = True\n"
    )
    text = transform_source(head.encode(), "x.py", TransformOptions()).rewritten.decode()
    assert "else:" not in text and "= False" not in text
    assert text.endswith("        )\n    torch.backends.cudnn.benchmark = True\n")
    # with a claim after it, what comes before the claim runs only on success too
    source = head + "    model.aux_ready = True\n"
    text = transform_source(source.encode(), "x.py", TransformOptions()).rewritten.decode()
    assert "benchmark = False" not in text and "model.aux_ready = False" in text
    assert text.index("else:") < text.index("benchmark = True")


@pytest.mark.parametrize(
    "flag, claim",
    [
        ("ok", True),
        ("self.aux_ready", True),
        ("capturing", True),
        ("model.training", False),
        ("torch.backends.cudnn.benchmark", False),
        ("self.token_ok_count", True),
    ],
)
def test_which_flags_claim_capture(flag, claim):
    source = (
        "import logging\nlogger = logging.getLogger(__name__)\n\n\n"
        f"def f(self, model, torch):\n    model.set_dspark_layers_to_capture([1])\n"
        f"    {flag} = True\n"
    )
    text = transform_source(source.encode(), "x.py", TransformOptions()).rewritten.decode()
    assert (f"{flag} = False" in text) is claim
    assert ("else:" in text) is claim


def test_a_claim_that_cannot_be_kept_consistent_is_for_review():
    source = (
        "def f(model, ids: list[int]):\n    enabled = False\n"
        "    for name in ('set_dspark_layers_to_capture',):\n"
        "        getattr(model, name)(ids)\n    enabled = True\n    return enabled\n"
    )
    result = transform_source(source.encode(), "x.py", TransformOptions())
    assert result.status is Status.UNCHANGED
    (site,) = result.call_sites
    assert site.note.startswith("enabled claims capture after the block"), site.note
    # without a value returned, the failure path leaves the function instead
    source = source.replace("    return enabled\n", "")
    text = transform_source(source.encode(), "x.py", TransformOptions()).rewritten.decode()
    assert "            enabled = False\n            return\n" in text
