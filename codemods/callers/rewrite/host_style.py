"""The host project's style, so that added code looks like the project's own.

- :func:`line_length` (and :func:`file_line_length`, what the codemods use): the line length
  a file's project configures, found by walking up from
  the file: in each directory, ``ruff.toml`` / ``.ruff.toml`` ``line-length``, then
  ``pyproject.toml`` ``[tool.ruff]`` ``line-length``, then ``[tool.black]`` ``line-length``,
  then ``setup.cfg`` / ``tox.ini`` ``[flake8]`` ``max-line-length``; the first found wins, the
  walk stops at the repository root (a directory holding ``.git``); 88 when none.  A malformed
  file raises :class:`HostStyleError` naming it.
- :func:`with_import_logging`: a module body with ``import logging`` where isort (profile
  black) puts it: in the standard-library section of the leading import block, among the plain
  ``import x`` lines in alphabetical order (before the ``from x import y`` lines), or as a
  section of its own between ``__future__`` imports and third-party imports.
- :func:`module_logger`: the name of a module-level logger, whatever its factory
  (``logging.getLogger(...)``, ``getLogger(...)``, ``get_colorful_logger(__name__)``,
  ``init_logger(__name__)``, ``structlog.get_logger()``...), so that no second one is added.

Pure functions of a path or of LibCST nodes.
"""

from __future__ import annotations

import configparser
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

import libcst as cst

from codemods.callers.analyse.syntax import last_name

DEFAULT_LINE_LENGTH = 88


class HostStyleError(ValueError):
    """A configuration file that cannot be read; the message names the file and the reason."""


# ----------------------------------------------------------------------- line length
def _load_toml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HostStyleError(f"{path}: cannot read: {exc}") from exc
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        return _toml_subset(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HostStyleError(f"{path}: not valid TOML: {exc}") from exc


def _toml_subset(text: str) -> dict:
    """Tables and ``key = integer`` pairs only: enough for ``line-length`` without tomllib."""
    data: dict = {}
    table = data
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        header = re.fullmatch(r"\[([A-Za-z0-9_.\-]+)\]", line)
        if header:
            table = data
            for part in header.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        pair = re.fullmatch(r"([A-Za-z0-9_\-]+)\s*=\s*(\d+)", line)
        if pair:
            table[pair.group(1)] = int(pair.group(2))
    return data


def _length(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise HostStyleError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _from_toml(path: Path, *tables: str) -> int | None:
    data = _load_toml(path)
    for table in tables:
        node: object = data
        for part in table.split(".") if table else ():
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and "line-length" in node:
            name = f"[{table}] line-length" if table else "line-length"
            return _length(node["line-length"], f"{path}: {name}")
    return None


def _from_flake8(path: Path) -> int | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise HostStyleError(f"{path}: cannot read: {exc}") from exc
    if not parser.has_section("flake8"):
        return None
    for key in ("max-line-length", "max_line_length"):
        if parser.has_option("flake8", key):
            value = parser.get("flake8", key).strip()
            if not value.isdigit():
                raise HostStyleError(f"{path}: [flake8] {key}: not an integer: {value!r}")
            return _length(int(value), f"{path}: [flake8] {key}")
    return None


def _directory_length(directory: Path) -> int | None:
    for name in (".ruff.toml", "ruff.toml"):
        if (directory / name).is_file():
            found = _from_toml(directory / name, "")
            if found is not None:
                return found
    if (directory / "pyproject.toml").is_file():
        found = _from_toml(directory / "pyproject.toml", "tool.ruff", "tool.black")
        if found is not None:
            return found
    for name in ("setup.cfg", "tox.ini"):
        if (directory / name).is_file():
            found = _from_flake8(directory / name)
            if found is not None:
                return found
    return None


def line_length(path: str | Path) -> int:
    """The line length configured for ``path`` (a file or a directory)."""
    start = Path(path).resolve()
    directory = start if start.is_dir() else start.parent
    for folder in (directory, *directory.parents):
        found = _directory_length(folder)
        if found is not None:
            return found
        if (folder / ".git").exists():
            break
    return DEFAULT_LINE_LENGTH


def file_line_length(path: str | Path) -> int:
    """The line length for code added to the file at ``path``: :func:`line_length` from its
    real path, or the default (88) when ``path`` names no file (source given as bytes)."""
    real = Path(path)
    if not real.is_file():
        return DEFAULT_LINE_LENGTH
    return line_length(real.resolve())


# --------------------------------------------------------------------- import logging
def _import_line(statement: cst.CSTNode) -> TypeGuard[cst.SimpleStatementLine]:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _module_name(statement: cst.SimpleStatementLine) -> str:
    first = statement.body[0]
    if isinstance(first, cst.ImportFrom):
        if first.relative:
            return "." * len(first.relative)
        return cst.Module(body=[]).code_for_node(first.module) if first.module else ""
    assert isinstance(first, cst.Import)
    return cst.Module(body=[]).code_for_node(first.names[0].name)


def _section(statement: cst.SimpleStatementLine) -> str:
    name = _module_name(statement)
    if name == "__future__":
        return "future"
    if name.split(".")[0] in sys.stdlib_module_names:
        return "stdlib"
    return "other"


def _docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _blank_prefix(lines: Sequence[cst.EmptyLine]) -> int:
    """How many of ``lines`` are blank before the first comment."""
    count = 0
    for line in lines:
        if line.comment is not None:
            break
        count += 1
    return count


def import_logging_index(body: Sequence[cst.BaseStatement], limit: int | None = None) -> int:
    """Where ``import logging`` goes in ``body`` (among its first ``limit`` statements)."""
    limit = len(body) if limit is None else limit
    start = 1 if body and _docstring(body[0]) else 0
    block: list[tuple[int, cst.SimpleStatementLine]] = []
    for index in range(start, limit):
        statement = body[index]
        if not _import_line(statement):
            break
        block.append((index, statement))
    after_future = start
    for index, statement in block:
        if _section(statement) == "future":
            after_future = index + 1
    stdlib = [(index, statement) for index, statement in block if _section(statement) == "stdlib"]
    for index, statement in stdlib:
        first = statement.body[0]
        if isinstance(first, cst.ImportFrom) or _module_name(statement).lower() > "logging":
            return index
    if stdlib:
        return stdlib[-1][0] + 1
    others = [index for index, statement in block if _section(statement) == "other"]
    return others[0] if others else after_future


def with_import_logging(
    body: Sequence[cst.BaseStatement], limit: int | None = None
) -> list[cst.BaseStatement]:
    """``body`` with ``import logging`` added where isort (profile black) puts it; blank lines
    are moved so that sections stay one blank line apart."""
    body = list(body)
    index = import_logging_index(body, limit)
    line = cst.parse_statement("import logging\n")
    assert isinstance(line, cst.SimpleStatementLine)
    following = body[index] if index < len(body) else None
    previous = body[index - 1] if index > 0 else None
    if following is not None and _import_line(following) and _section(following) == "stdlib":
        # Take the place of the line it goes before, with that line's leading lines.
        body[index] = following.with_changes(leading_lines=())
        body.insert(index, line.with_changes(leading_lines=following.leading_lines))
        return body
    if previous is not None and _import_line(previous) and _section(previous) == "stdlib":
        body.insert(index, line)
        return body
    # A section of its own: one blank line before it (unless first in the file), and one
    # between it and the next section's first line (its comments stay with it).
    leading: list[cst.EmptyLine] = [] if index == 0 else [cst.EmptyLine()]
    if following is not None and isinstance(
        following, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
    ):
        kept = list(following.leading_lines)[_blank_prefix(following.leading_lines) :]
        if _import_line(following):
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine(), *kept])
        elif not following.leading_lines:
            body[index] = following.with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(index, line.with_changes(leading_lines=leading))
    return body


# ---------------------------------------------------------------------------- loggers
#: ``getLogger``, ``get_logger``, ``get_colorful_logger``, ``init_logger``, ``create_logger``...
_FACTORY = re.compile(r"logger$", re.IGNORECASE)


def is_logger_factory_call(value: cst.BaseExpression | None) -> bool:
    """``logging.getLogger(...)``, ``get_colorful_logger(...)``, ``init_logger(...)``..."""
    if not isinstance(value, cst.Call):
        return False
    name = last_name(value.func)
    return name is not None and bool(_FACTORY.search(name))


def module_logger(module: cst.Module) -> str | None:
    """The first module-level name bound to a logger factory's result, or None."""
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            value: cst.BaseExpression | None
            if isinstance(small, cst.Assign):
                targets = [target.target for target in small.targets]
                value = small.value
            elif isinstance(small, cst.AnnAssign):
                targets, value = [small.target], small.value
            else:
                continue
            names = [target.value for target in targets if isinstance(target, cst.Name)]
            if names and is_logger_factory_call(value):
                return names[0]
    return None
