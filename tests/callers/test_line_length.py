"""The codemods add no line longer than the host project's configured line length, found by
walking up from the file's real path (here a project with ``line-length = 79``), and lay
long lines out as black does."""

from __future__ import annotations

import logging
import shutil
import types
from pathlib import Path

import pytest
from caller_cases import CASES

from codemods.callers.records import Status
from codemods.callers.rewrite.host_style import DEFAULT_LINE_LENGTH, file_line_length
from codemods.callers.transform import TransformOptions, transform_source

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "fixtures" / "line_length_79" / "project"
SOURCE = PROJECT / "drafting" / "capture_setup.py"
EXPECTED = ROOT / "fixtures" / "line_length_79" / "expected"
POLICIES = {
    "capture_setup.py": TransformOptions(),
    "capture_setup_raise.py": TransformOptions(guard_policy="raise", fallback_policy="raise"),
}


def added_lines(before: str, after: str) -> list[str]:
    old = set(before.splitlines())
    return [line for line in after.splitlines() if line not in old]


def test_the_project_configures_79():
    assert file_line_length(SOURCE) == 79
    assert file_line_length("no/such/file.py") == DEFAULT_LINE_LENGTH == 88


@pytest.mark.parametrize("expected", sorted(POLICIES))
def test_rewrite_fits_79_columns(expected):
    source = SOURCE.read_bytes()
    result = transform_source(source, str(SOURCE), POLICIES[expected])
    assert result.status is Status.CHANGED, result.error
    assert result.rewritten == (EXPECTED / expected).read_bytes()
    added = added_lines(source.decode(), result.rewritten.decode())
    assert added and max(len(line) for line in added) <= 79
    compile(result.rewritten, str(SOURCE), "exec")
    again = transform_source(result.rewritten, str(SOURCE), POLICIES[expected])
    assert again.status is Status.UNCHANGED, again.error


def test_the_same_file_elsewhere_gets_88_columns(tmp_path):
    """The limit comes from the configuration: copied out of the project, the rewrite differs
    and uses up to 88 columns; an explicit line length wins over the configuration."""
    copy = tmp_path / "capture_setup.py"
    shutil.copy(SOURCE, copy)
    (tmp_path / ".git").mkdir()  # the walk stops at a repository root
    source = copy.read_bytes()
    result = transform_source(source, str(copy), TransformOptions())
    assert result.status is Status.CHANGED
    assert result.rewritten != (EXPECTED / "capture_setup.py").read_bytes()
    added = added_lines(source.decode(), result.rewritten.decode())
    assert 79 < max(len(line) for line in added) <= 88
    forced = transform_source(source, str(copy), TransformOptions(line_length=79))
    assert forced.rewritten == (EXPECTED / "capture_setup.py").read_bytes()


@pytest.mark.parametrize("policy", ["default", "raise"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_caller_fixtures_add_no_line_over_88(case, policy):
    added = added_lines(case.before.decode(), case.expected(policy).decode())
    assert all(len(line) <= 88 for line in added), [line for line in added if len(line) > 88]


def test_malformed_configuration_fails_naming_the_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 'wide'\n")
    (tmp_path / ".git").mkdir()
    path = tmp_path / "x.py"
    source = b"def f(m, ids=None):\n    m.set_dspark_layers_to_capture(ids)\n"
    path.write_bytes(source)
    result = transform_source(source, str(path), TransformOptions())
    assert result.status is Status.FAILED
    assert "pyproject.toml" in result.error and result.rewritten is None


class FakeModel:
    def __init__(self, kind: str, pp_size: int = 1) -> None:
        self.calls: list = []

        def hook(layer_ids):
            if kind != "eagle3":
                if layer_ids is None:
                    raise ValueError("layer ids required")
                if pp_size > 1:
                    raise NotImplementedError("requires PP=1")
            self.calls.append(layer_ids)

        setattr(self, f"set_{kind}_layers_to_capture", hook)


def _capture(code: bytes, model, method):
    module = types.ModuleType("capture_setup")
    exec(compile(code, "capture_setup.py", "exec"), module.__dict__)
    return module.DraftCapture(model, method)


def test_wrapped_code_behaves(caplog):
    after = (EXPECTED / "capture_setup.py").read_bytes()
    eagle3 = FakeModel("eagle3")
    _capture(after, eagle3, "eagle3").enable(None)
    assert eagle3.calls == [None]  # EAGLE3's default layers
    dflash = FakeModel("dflash")
    _capture(after, dflash, "dflash").enable(None)
    assert dflash.calls == []
    with caplog.at_level(logging.WARNING):
        _capture(after, FakeModel("dflash", pp_size=2), "dflash").enable([4])
        _capture(after, FakeModel("dspark", 2), "dspark").enable_dspark(
            types.SimpleNamespace(capture_layers=[4])
        )
    assert caplog.text.count("running without aux hidden capture") == 2
    raising = (EXPECTED / "capture_setup_raise.py").read_bytes()
    with pytest.raises(ValueError, match="capture_layer_ids is unset"):
        _capture(raising, FakeModel("dflash"), "dflash").enable(None)
