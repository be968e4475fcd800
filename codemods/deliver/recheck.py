"""Re-check committed Python files: each must parse with LibCST and compile.

before: repository-relative paths of the files a delivery committed.
after:  a :class:`~codemods.deliver.messages.Verification` naming the files checked and any failure
        (the ``idempotent`` field is filled in by the command that can re-run itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from codemods.deliver.messages import Verification

PYTHON_SUFFIXES = (".py", ".pyi")


def recheck_python_files(root: Path, paths: Sequence[str]) -> Verification:
    """Parse (LibCST) and compile every ``.py``/``.pyi`` file among ``paths`` under ``root``."""
    # Here, so that importing the command line does not load the parser.
    import libcst

    from codemods.callers.transform import verify_source

    checked: list[str] = []
    failures: list[tuple[str, str]] = []
    for path in paths:
        if not path.endswith(PYTHON_SUFFIXES):
            continue
        file = root / path
        if not file.is_file():  # deleted by the change: nothing to check
            continue
        checked.append(path)
        source = file.read_bytes()
        try:
            verify_source(source, path)
        except libcst.ParserSyntaxError as error:
            failures.append(
                (path, f"LibCST cannot parse it: {error.message} (line {error.raw_line})")
            )
        except (SyntaxError, ValueError) as error:
            failures.append((path, f"does not compile: {error}"))
    return Verification(rechecked=tuple(checked), failures=tuple(failures))
