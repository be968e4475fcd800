"""Rewritten callers keep the host's style: isort (profile black) still passes where it passed,
and a module's own logger, whatever its factory, is reused (never a second one)."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import isort
import libcst as cst
import pytest
from caller_cases import CALLERS, CASE_IDS, CASES, ROOT

from codemods.callers.records import Status
from codemods.callers.rewrite.host_style import is_logger_factory_call
from codemods.callers.transform import TransformOptions, transform_source

CORPUS = sorted((ROOT / "fixtures" / "corpus").glob("*.py"))


def sorted_by_isort(text: str) -> bool:
    return isort.check_code(text, profile="black", show_diff=False)


def module_loggers(text: str) -> int:
    count = 0
    for statement in cst.parse_module(text).body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, (cst.Assign, cst.AnnAssign)) and is_logger_factory_call(
                    small.value
                ):
                    count += 1
    return count


@pytest.mark.parametrize("policy", ["default", "raise"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_caller_fixtures_stay_isort_clean_with_one_logger(case, policy):
    before, after = case.before.decode(), case.expected(policy).decode()
    if sorted_by_isort(before):
        assert sorted_by_isort(after), case.name
    assert module_loggers(after) <= max(1, module_loggers(before))


@pytest.mark.parametrize("path", CORPUS, ids=[path.name for path in CORPUS])
def test_corpus_stays_isort_clean_with_one_logger(path):
    source = path.read_bytes()
    result = transform_source(source, path.name, TransformOptions())
    assert result.status is not Status.FAILED, result.error
    if result.status is not Status.CHANGED:
        return
    after = result.rewritten.decode()
    if sorted_by_isort(source.decode()):
        assert sorted_by_isort(after), path.name
    assert module_loggers(after) <= max(1, module_loggers(source.decode()))


def test_the_isort_check_can_fail():
    assert not sorted_by_isort('"""Doc."""\n\nimport logging\nimport torch\n')


def test_colorful_logger_is_reused_at_run_time(monkeypatch, caplog):
    utils = types.ModuleType("sglang.srt.utils")
    utils.get_colorful_logger = logging.getLogger
    for name in ("sglang", "sglang.srt"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.utils", utils)
    path = Path(CALLERS / "colorful_logger" / "after.py")
    module = types.ModuleType("feature_dump")
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    assert "capture_logger" not in module.__dict__ and "logging" not in module.__dict__

    class PipelineParallelModel:
        def set_dspark_layers_to_capture(self, layer_ids):
            raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")

    with caplog.at_level(logging.WARNING, logger="feature_dump"):
        module.enable_capture(PipelineParallelModel(), types.SimpleNamespace(capture_layers=[3]))
    (record,) = caplog.records
    assert record.name == "feature_dump"
    assert "requires PP=1" in record.getMessage()
