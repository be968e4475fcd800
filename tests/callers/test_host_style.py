"""Host style: configured line length, isort's place for ``import logging``, existing loggers."""

from __future__ import annotations

import textwrap

import isort
import libcst as cst
import pytest

from codemods.callers.rewrite.host_style import (
    DEFAULT_LINE_LENGTH,
    HostStyleError,
    import_logging_index,
    line_length,
    module_logger,
    with_import_logging,
)


# ----------------------------------------------------------------------- line length
def write(folder, name, text):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def test_default_when_nothing_is_configured(tmp_path):
    (tmp_path / ".git").mkdir()
    source = write(tmp_path, "pkg/mod.py", "x = 1\n")
    assert line_length(source) == DEFAULT_LINE_LENGTH == 88


def test_ruff_then_black_then_flake8(tmp_path):
    (tmp_path / ".git").mkdir()
    source = write(tmp_path, "pkg/mod.py", "x = 1\n")
    write(tmp_path, "tox.ini", "[flake8]\nmax-line-length = 99\n")
    assert line_length(source) == 99
    write(tmp_path, "setup.cfg", "[metadata]\nname = x\n[flake8]\nmax-line-length = 120\n")
    assert line_length(source) == 120
    write(tmp_path, "pyproject.toml", "[tool.black]\nline-length = 100\n")
    assert line_length(source) == 100
    write(
        tmp_path,
        "pyproject.toml",
        "[tool.black]\nline-length = 100\n[tool.ruff]\nline-length = 79\n",
    )
    assert line_length(source) == 79
    write(tmp_path, "ruff.toml", "line-length = 110\n")
    assert line_length(source) == 110


def test_nearest_directory_wins_and_the_walk_stops_at_the_repository(tmp_path):
    write(tmp_path, "pyproject.toml", "[tool.ruff]\nline-length = 120\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    source = write(repo, "src/pkg/mod.py", "x = 1\n")
    assert line_length(source) == 88  # the folder above the repository is not the project's
    write(repo, "src/pyproject.toml", "[project]\nname = 'x'\n")  # no setting: keep walking
    write(repo, "setup.cfg", "[flake8]\nmax_line_length = 79\n")
    assert line_length(source) == 79
    write(repo, "src/pkg/setup.cfg", "[flake8]\nmax-line-length = 101\n")
    assert line_length(source) == 101


@pytest.mark.parametrize(
    "name, text, reason",
    [
        ("pyproject.toml", "[tool.ruff\nline-length = 1\n", "not valid TOML"),
        ("pyproject.toml", "[tool.black]\nline-length = 'long'\n", "positive integer"),
        ("setup.cfg", "[flake8]\nmax-line-length = wide\n", "not an integer"),
        ("tox.ini", "no section header\n", "cannot read"),
    ],
)
def test_malformed_configuration_names_the_file(tmp_path, name, text, reason):
    (tmp_path / ".git").mkdir()
    source = write(tmp_path, "mod.py", "x = 1\n")
    config = write(tmp_path, name, text)
    with pytest.raises(HostStyleError, match=reason) as info:
        line_length(source)
    assert str(config) in str(info.value)


# --------------------------------------------------------------------- import logging
LOGGER = "logger = logging.getLogger(__name__)\n"

MODULES = {
    "third_party_only": "import torch\n\nx = 1\n",
    "docstring_third_party": '"""Doc."""\n\nimport torch\nfrom torch import nn\n\nx = 1\n',
    "future_and_third_party": "from __future__ import annotations\n\nimport torch\n\nx = 1\n",
    "stdlib_before": "import json\nimport os\n\nimport torch\n\nx = 1\n",
    "stdlib_after": "import os\nimport sys\n\nimport torch\n\nx = 1\n",
    "stdlib_from_only": "from typing import Any\n\nimport numpy as np\n\nx: Any = 1\n",
    "stdlib_mixed": "import abc\nimport re\nfrom pathlib import Path\n\nimport torch\n\nx = 1\n",
    "third_party_comment": '"""Doc."""\n\n# third-party\nimport torch\n\nx = 1\n',
    "local_only": "from . import models\n\nx = 1\n",
    "no_imports": '"""Doc."""\n\nx = 1\n',
    "nothing_at_all": "x = 1\n",
    "try_import_after": (
        "import os\n\ntry:\n    import torch\nexcept ImportError:\n    torch = None\n\nx = 1\n"
    ),
}


def added(source: str) -> str:
    module = cst.parse_module(source)
    body = list(module.body)
    # As the fallback codemod does: the logger right after the imports, then the import.
    end = 0
    for index, statement in enumerate(body):
        if (
            isinstance(statement, cst.SimpleStatementLine)
            and isinstance(statement.body[0], (cst.Import, cst.ImportFrom, cst.Expr))
            and (index == 0 or not isinstance(statement.body[0], cst.Expr))
        ):
            end = index + 1
    logger = cst.parse_statement(LOGGER).with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(end, logger)
    return module.with_changes(body=with_import_logging(body, end)).code


@pytest.mark.parametrize("name", sorted(MODULES))
def test_import_logging_goes_where_isort_puts_it(name):
    source = MODULES[name]
    assert isort.check_code(source, profile="black", show_diff=False), source
    result = added(source)
    assert result.count("import logging\n") == 1
    compile(result, name, "exec")
    assert isort.check_code(result, profile="black", show_diff=True), result


def test_index_in_the_stdlib_section():
    body = cst.parse_module("import abc\nimport re\nfrom os import path\n\nimport torch\n").body
    assert import_logging_index(body) == 1
    body = cst.parse_module("import abc\nfrom os import path\n\nimport torch\n").body
    assert import_logging_index(body) == 1
    body = cst.parse_module("import abc\nimport json\n\nimport torch\n").body
    assert import_logging_index(body) == 2
    body = cst.parse_module("from __future__ import annotations\n\nimport torch\n").body
    assert import_logging_index(body) == 1


# ---------------------------------------------------------------------------- loggers
@pytest.mark.parametrize(
    "source, name",
    [
        ("import logging\nlogger = logging.getLogger(__name__)\n", "logger"),
        ("import logging as lg\nlog = lg.getLogger('x')\n", "log"),
        ("from logging import getLogger\n_LOG = getLogger(__name__)\n", "_LOG"),
        ("from sglang.srt.utils import get_colorful_logger\n"
         "logger = get_colorful_logger(__name__)\n", "logger"),
        ("from vllm.logger import init_logger\nlogger = init_logger(__name__)\n", "logger"),
        ("import structlog\nlog: object = structlog.get_logger()\n", "log"),
        ("from utils import create_logger\nLOGGER = create_logger('x')\n", "LOGGER"),
    ],
)  # fmt: skip
def test_module_logger_whatever_its_factory(source, name):
    assert module_logger(cst.parse_module(source)) == name


@pytest.mark.parametrize(
    "source",
    [
        "import logging\n",
        "import logging\ncls = logging.getLoggerClass()\n",
        "def f():\n    logger = logging.getLogger(__name__)\n",
        "from loguru import logger\n",
        "blog = load_blog()\n",
        "from utils import setup_logging\nLOGGER = setup_logging('x')\n",
        "logger = None\n",
    ],
)
def test_no_module_logger(source):
    assert module_logger(cst.parse_module(source)) is None
