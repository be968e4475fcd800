"""The command line that re-creates a click invocation, for reports.

before: a click context after parsing (``mode="check"``, ``output_format="json"``, paths).
after:  ``auxcap migrate --check --format json src`` -- only what was given on the command
        line, in the command's option order, arguments last, shell-quoted.
"""

from __future__ import annotations

import shlex

import click
from click.core import ParameterSource


def _option_words(option: click.Option, value: object) -> list[str]:
    flag = max(option.opts, key=len)
    if option.is_flag and option.is_bool_flag:
        if value:
            return [flag]
        return [max(option.secondary_opts, key=len)] if option.secondary_opts else []
    if option.is_flag:  # one of several options sharing a name, each with its own value
        return [flag] if value == option.flag_value else []
    # click gives a multiple option's values as a tuple
    values = value if option.multiple and isinstance(value, tuple) else [value]
    words: list[str] = []
    for item in values:
        words += [flag, str(item)]
    return words


def command_line(ctx: click.Context, program: str = "auxcap") -> str:
    """Shell-quoted command line of ``ctx`` (and its parents) from the parsed parameters."""
    names = []
    current: click.Context | None = ctx
    while current is not None and current.parent is not None:
        names.append(current.info_name or "")
        current = current.parent
    words = [program, *reversed(names)]
    arguments: list[str] = []
    for param in ctx.command.get_params(ctx):
        if param.name is None:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not ParameterSource.COMMANDLINE:
            continue
        value = ctx.params.get(param.name)
        if isinstance(param, click.Argument):
            values = value if isinstance(value, (list, tuple)) else [value]
            arguments += [str(item) for item in values]
        elif isinstance(param, click.Option):
            words += _option_words(param, value)
    return shlex.join(words + arguments)
