"""Per-file transform: bytes in, a :class:`~codemods.callers.records.FileResult` out.

``transform_source`` parses the bytes with LibCST (so encoding, BOM and line endings are
kept), discovers the call sites, applies the guard and then the fallback codemod, and
verifies that the result re-parses and compiles.  Test modules (unless
``include_tests``) and modules written for another engine are only reported
(:mod:`codemods.callers.scope`).  Anything that goes wrong yields a
``FAILED`` result and the original bytes untouched; a file without hook calls is never
modified.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from codemods.callers import scope
from codemods.callers.analyse import Analysis, analyse
from codemods.callers.options import TransformOptions
from codemods.callers.records import FileResult, Status
from codemods.callers.rewrite import registry
from codemods.sources.prefilter import Prefilter


def _parse(source: bytes) -> cst.Module:
    return cst.parse_module(source)


#: LibCST's message: ``parser error: error at LINE:COLUMN: expected one of ...`` or
#: ``tokenizer error: ...`` (its own position is where its grammar gave up).
_LIBCST_MESSAGE = re.compile(
    r"^(?:parser|tokenizer) error: (?:error at (?P<line>\d+):(?P<column>\d+): )?(?P<text>.*)$",
    re.DOTALL,
)


def describe_syntax_error(source: bytes, path: str, error: cst.ParserSyntaxError) -> str:
    """``syntax error at line L, column C: WHAT`` (both 1-based, as in the scan listing),
    in Python's own words where Python rejects the file too; LibCST's position and words
    (without its prefixes) where only LibCST does."""
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as python:
        if python.lineno is not None:
            column = max(python.offset or 1, 1)
            return f"syntax error at line {python.lineno}, column {column}: {python.msg}"
    except (ValueError, MemoryError, RecursionError):
        pass
    else:
        return _libcst_only(error)
    return _libcst_only(error, python_rejects=True)


def _libcst_only(error: cst.ParserSyntaxError, python_rejects: bool = False) -> str:
    match = _LIBCST_MESSAGE.match(error.message)
    text = match["text"] if match else error.message
    line, column = error.raw_line, error.raw_column + 1
    if match and match["line"]:
        line, column = int(match["line"]), int(match["column"]) + 1
    if python_rejects:
        return f"syntax error at line {line}, column {column}: {text}"
    return f"line {line}, column {column}: Python accepts it, but LibCST cannot parse it: {text}"


def _describe(error: Exception, source: bytes = b"", path: str = "") -> str:
    if isinstance(error, cst.ParserSyntaxError):
        return describe_syntax_error(source, path, error)
    if isinstance(error, (UnicodeDecodeError, LookupError)) or (
        isinstance(error, SyntaxError) and "encoding" in str(error)
    ):
        return f"cannot decode the file: {error}"
    return f"{type(error).__name__}: {error}"


def _analyse(module: cst.Module, path: str, options: TransformOptions) -> Analysis:
    return analyse(module, path, options.hooks)


def _scan(
    source: bytes, path: str, options: TransformOptions, prefilter: bool
) -> tuple[FileResult, Analysis | None]:
    if prefilter and not Prefilter.for_names(options.extra_hooks).needs_parse(source):
        return FileResult(path, Status.UNCHANGED, original=source), None
    try:
        module = _parse(source)
        analysis = _analyse(module, path, options)
        # Test modules and other engines' modules are reported, not rewritten.
        if analysis.found:
            reason = scope.module_skip_reason(
                module,
                path,
                options.hooks.names,
                include_tests=options.include_tests,
                analysis=analysis,
            )
            analysis = scope.skip_analysis(analysis, reason)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file alone
        error_text = _describe(error, source, path)
        return FileResult(path, Status.FAILED, original=source, error=error_text), None
    return FileResult(path, Status.UNCHANGED, analysis.sites, original=source), analysis


def scan_source(
    source: bytes, path: str, options: TransformOptions | None = None, *, prefilter: bool = True
) -> FileResult:
    """Discover call sites only; never rewrites.

    A file that the prefilter shows to hold no call site is not parsed (and so never fails);
    ``prefilter=False`` parses every file.
    """
    return _scan(source, path, options or TransformOptions(), prefilter)[0]


def verify_source(source: bytes, path: str) -> None:
    """The one check that code auxcap produced is sound: LibCST parses it and ``compile()``
    accepts it (raises ``libcst.ParserSyntaxError``, ``SyntaxError`` or ``ValueError``)."""
    cst.parse_module(source)
    compile(source, path, "exec", dont_inherit=True)


def _verify(rewritten: bytes, path: str) -> None:
    verify_source(rewritten, path)


def transform_source(
    source: bytes, path: str, options: TransformOptions | None = None, *, prefilter: bool = True
) -> FileResult:
    """Apply the caller codemods to one file's bytes (``prefilter`` as for ``scan_source``).

    The file is parsed and analysed once; the guard works from that analysis, and the
    fallback from the same analysis carried over to the guarded module (see
    :func:`codemods.callers.rewrite.apply.rewrite`)."""
    options = options or TransformOptions()
    scanned, analysis = _scan(source, path, options, prefilter)
    if analysis is None:
        return scanned
    sites = scanned.call_sites
    needs = {action for site in sites for action in site.actions}
    if not needs & registry.ACTIONS:
        return scanned
    from codemods.callers.rewrite.apply import rewrite

    rewritten = source  # what a syntax error's position refers to
    try:
        rewritten, steps = rewrite(source, analysis, path, options)
        _verify(rewritten, path)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file alone
        return FileResult(
            path,
            Status.FAILED,
            sites,
            original=source,
            error=f"could not rewrite: {_describe(error, rewritten, path)}",
        )
    if rewritten == source:
        return scanned
    return FileResult(
        path, Status.CHANGED, sites, original=source, rewritten=rewritten, steps=steps
    )
