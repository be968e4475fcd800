"""Fallback codemod: try/except NotImplementedError, logger reuse and placement."""

from __future__ import annotations

import logging

import libcst as cst
import pytest
from libcst.codemod import CodemodContext, CodemodTest

from codemods.callers.records import Status
from codemods.callers.rewrite.fallback import FallbackCommand
from codemods.callers.transform import TransformOptions, transform_source


class TestFallbackCommand(CodemodTest):
    TRANSFORM = FallbackCommand

    def test_uses_the_existing_logger(self):
        before = """
            import logging

            log = logging.getLogger("trainer")


            def f(m):
                m.set_dspark_layers_to_capture([1])
        """
        after = """
            import logging

            log = logging.getLogger("trainer")


            def f(m):
                try:
                    m.set_dspark_layers_to_capture([1])
                except NotImplementedError as exc:
                    log.warning(
                        "set_dspark_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        exc,
                    )
        """
        self.assertCodemod(before, after)

    def test_adds_import_and_logger_after_the_imports(self):
        before = """
            \"\"\"Feature dump.\"\"\"

            from __future__ import annotations

            import os
            import sys

            import torch

            LIMIT = 3


            def f(m):
                m.set_msd_layers_to_capture([1])
        """
        after = """
            \"\"\"Feature dump.\"\"\"

            from __future__ import annotations

            import logging
            import os
            import sys

            import torch

            logger = logging.getLogger(__name__)

            LIMIT = 3


            def f(m):
                try:
                    m.set_msd_layers_to_capture([1])
                except NotImplementedError as exc:
                    logger.warning(
                        "set_msd_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        exc,
                    )
        """
        self.assertCodemod(before, after)

    def test_module_without_imports(self):
        before = """
            def f(m):
                m.set_msd_layers_to_capture([1])
        """
        after = """
            import logging

            logger = logging.getLogger(__name__)


            def f(m):
                try:
                    m.set_msd_layers_to_capture([1])
                except NotImplementedError as exc:
                    logger.warning(
                        "set_msd_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        exc,
                    )
        """
        self.assertCodemod(before, after)

    def test_from_logging_import_get_logger_and_taken_names(self):
        before = """
            from logging import getLogger

            logger = object()
            _log = getLogger(__name__)


            def f(m, errors):
                m.set_dflash_layers_to_capture([1])
                for exc in errors:
                    print(exc)


            def g(m):
                m.set_dflash_layers_to_capture([2])
        """
        after = """
            from logging import getLogger

            logger = object()
            _log = getLogger(__name__)


            def f(m, errors):
                try:
                    m.set_dflash_layers_to_capture([1])
                except NotImplementedError as capture_exc:
                    _log.warning(
                        "set_dflash_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        capture_exc,
                    )
                for exc in errors:
                    print(exc)


            def g(m):
                try:
                    m.set_dflash_layers_to_capture([2])
                except NotImplementedError as exc:
                    _log.warning(
                        "set_dflash_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        exc,
                    )
        """
        self.assertCodemod(before, after)

    def test_logger_name_taken_by_something_else(self):
        before = """
            import logging
            from mylib import logger


            def f(m):
                m.set_dflash_layers_to_capture([1])
        """
        after = """
            import logging
            from mylib import logger

            capture_logger = logging.getLogger(__name__)


            def f(m):
                try:
                    m.set_dflash_layers_to_capture([1])
                except NotImplementedError as exc:
                    capture_logger.warning(
                        "set_dflash_layers_to_capture unavailable, running without aux hidden "
                        "capture: %s",
                        exc,
                    )
        """
        self.assertCodemod(before, after)

    def test_raise_policy_has_an_actionable_hint(self):
        before = """
            def f(m):
                m.set_dspark_layers_to_capture([1])
        """
        after = """
            def f(m):
                try:
                    m.set_dspark_layers_to_capture([1])
                except NotImplementedError as exc:
                    raise NotImplementedError(
                        "set_dspark_layers_to_capture cannot capture aux hidden states under "
                        "pipeline parallelism: run with --pp-size 1, or apply the upstream patch "
                        "(auxcap upstream-patch)"
                    ) from exc
        """
        self.assertCodemod(before, after, fallback_policy="raise")

    def test_calls_inside_matching_handlers_are_left_alone(self):
        for handler in (
            "except NotImplementedError:",
            "except (ValueError, NotImplementedError) as error:",
            "except Exception:",
            "except RuntimeError:",
            "except BaseException:",
            "except:",
            "except builtins.NotImplementedError:",
        ):
            code = f"def f(m):\n    try:\n        m.set_dspark_layers_to_capture([1])\n    {handler}\n        pass\n"
            with self.subTest(handler=handler):
                self.assertCodemod(code, code, expected_skip=False)

    def test_call_in_handler_or_finally_is_still_wrapped(self):
        before = """
            def f(m):
                try:
                    pass
                except NotImplementedError:
                    m.set_dspark_layers_to_capture([1])
        """
        result = transform_source(
            (
                "import logging\nlogger = logging.getLogger()\n"
                + cst.parse_module(before.replace("\n            ", "\n")).code
            ).encode(),
            "f.py",
            TransformOptions(),
        )
        assert result.status is Status.CHANGED
        assert result.rewritten.count(b"except NotImplementedError") == 2


SOURCE = """
import logging

logger = logging.getLogger("capture-test")


def enable(model):
    model.set_dspark_layers_to_capture([3, 18])
    return "continued"
"""


class _PipelineParallelModel:
    def set_dspark_layers_to_capture(self, layer_ids):
        raise NotImplementedError("DSPARK aux hidden capture requires PP=1.")


def _load(options: TransformOptions) -> dict:
    result = transform_source(SOURCE.encode(), "enable.py", options)
    assert result.status is Status.CHANGED, result.error
    namespace: dict = {"__name__": "enable"}
    exec(compile(result.rewritten, "enable.py", "exec"), namespace)
    return namespace


def test_warn_policy_logs_and_continues(caplog):
    enable = _load(TransformOptions())["enable"]
    with caplog.at_level(logging.WARNING, logger="capture-test"):
        assert enable(_PipelineParallelModel()) == "continued"
    (record,) = caplog.records
    assert "set_dspark_layers_to_capture" in record.getMessage()
    assert "requires PP=1" in record.getMessage()


def test_raise_policy_reraises_with_hint_and_cause():
    enable = _load(TransformOptions(fallback_policy="raise"))["enable"]
    with pytest.raises(NotImplementedError, match="--pp-size 1") as info:
        enable(_PipelineParallelModel())
    assert "auxcap upstream-patch" in str(info.value)
    assert isinstance(info.value.__cause__, NotImplementedError)
    assert "requires PP=1" in str(info.value.__cause__)


def test_guard_and_fallback_compose_try_inside_if():
    source = b"def f(model, args):\n    model.set_dspark_layers_to_capture(args.layers)\n"
    result = transform_source(source, "f.py", TransformOptions())
    text = result.rewritten.decode()
    assert (
        text.index("if args.layers:")
        < text.index("try:")
        < text.index("except NotImplementedError")
    )
    lines = text.splitlines()
    if_line = next(line for line in lines if "if args.layers:" in line)
    try_line = next(line for line in lines if line.strip() == "try:")
    assert len(try_line) - len(try_line.lstrip()) > len(if_line) - len(if_line.lstrip())


def test_crlf_bom_and_tabs_are_kept():
    source = (
        "\ufeffimport logging\r\n\r\nlogger = logging.getLogger(__name__)\r\n\r\n\r\n"
        "def f(model, args):\r\n\tmodel.set_dspark_layers_to_capture(args.layers)\r\n"
    ).encode("utf-8")
    result = transform_source(source, "f.py", TransformOptions())
    assert result.status is Status.CHANGED
    out = result.rewritten
    assert out.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in out.replace(b"\r\n", b"")
    assert b"\r\n\tif args.layers:\r\n\t\ttry:\r\n\t\t\tmodel.set_dspark" in out
    compile(out, "f.py", "exec")


def test_latin1_encoding_cookie_is_kept():
    source = (
        "# -*- coding: latin-1 -*-\n"
        "def f(model, args):\n"
        "    # caf\xe9\n"
        "    model.set_dspark_layers_to_capture(args.layers)\n"
    ).encode("latin-1")
    result = transform_source(source, "f.py", TransformOptions())
    assert result.status is Status.CHANGED
    assert "# caf\xe9".encode("latin-1") in result.rewritten
    result.rewritten.decode("latin-1")
    compile(result.rewritten, "f.py", "exec")


def test_unknown_policy_is_rejected():
    with pytest.raises(ValueError):
        FallbackCommand(CodemodContext(), fallback_policy="ignore")


def test_logger_is_defined_before_its_first_module_level_use():
    source = (
        b"import torch\n\nmodel = torch.load('m')\nmodel.set_msd_layers_to_capture([1])\n\n"
        b"import json\n"
    )
    result = transform_source(source, "script.py", TransformOptions())
    text = result.rewritten.decode()
    assert text.index("logger = logging.getLogger(__name__)") < text.index("try:")
    # isort (profile black): the standard library first, one blank line before third-party.
    assert text.startswith("import logging\n\nimport torch\n\nlogger = logging.getLogger")
