"""``auxcap sglang status|apply|revert``: the click group over ``codemods.installed``.

Thin: picks the interpreter, prints the library's messages (``apply`` shows its steps on
stderr, on a terminal only), owns the exit codes (0 success
or nothing to do; 1 refused, every byte as it was; 2 no usable interpreter, sglang or
release).
"""

from __future__ import annotations

import sys

import click

from codemods.cli.progress import PhaseBar
from codemods.installed.errors import InstalledError, Refused

EXIT_OK, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2

_python_option = click.option(
    "--python",
    "python",
    metavar="PY",
    default=None,
    help="The interpreter whose sglang to look at [default: `python` on PATH].",
)


def _say(message: str) -> None:
    click.echo(f"auxcap: {message}")


def _run(action, python: str | None, *args, bar: PhaseBar | None = None) -> None:
    """Run ``action(python, *args, say[, phases])``; ``bar``: the steps of a long command on
    stderr, wiped before each message."""
    from codemods.installed.locate import default_python

    def say(message: str) -> None:
        if bar is not None:
            bar.clear()
        _say(message)

    try:
        if python is None:
            python = default_python()
            say(f"using `python` from PATH: {python}")
        if bar is None:
            action(python, *args, say)
        else:
            action(python, *args, say, bar)
    except Refused as err:
        _close(bar)
        click.echo(f"auxcap: refused: {err}", err=True)
        sys.exit(EXIT_REFUSED)
    except InstalledError as err:
        _close(bar)
        click.echo(f"auxcap: error: {err}", err=True)
        sys.exit(EXIT_ERROR)
    finally:
        _close(bar)
    sys.exit(EXIT_OK)


def _close(bar: PhaseBar | None) -> None:
    if bar is not None:
        bar.close()


@click.group("sglang")
def sglang() -> None:
    """Apply the upstream change to the SGLang an interpreter imports (a wheel in
    site-packages or an editable checkout), check it, and take it back: all or nothing,
    journalled inside the package."""


@sglang.command()
@_python_option
def status(python: str | None) -> None:
    """Which sglang PY imports, whether auxcap's change is applied, and which files differ
    from the release."""
    from codemods.installed import actions

    _run(actions.status, python)


@sglang.command()
@_python_option
@click.option(
    "--models",
    default=None,
    metavar="NAME,...",
    help="Only these model files (e.g. llama,qwen3); default: every model the upstream "
    "patch covers.",
)
def apply(python: str | None, models: str | None) -> None:
    """Apply auxcap's change to the sglang PY imports, every file or none; a second apply
    does nothing."""
    from codemods.cli.upstream_patch import parse_models
    from codemods.installed import actions

    _run(actions.apply, python, parse_models(models), bar=PhaseBar())


@sglang.command()
@_python_option
@click.option(
    "--force", is_flag=True, help="Restore files that changed since the change was applied, too."
)
def revert(python: str | None, force: bool) -> None:
    """Restore every file auxcap's change touched, byte for byte, and delete the files it
    added."""
    from codemods.installed import actions

    _run(actions.revert, python, force)
