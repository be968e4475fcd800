"""Per-file transform: bytes in, a :class:`~codemods.records.FileResult` out.

``transform_source`` parses the bytes with LibCST (so encoding, BOM and line endings are
kept), discovers the call sites, applies the guard and then the fallback codemod, and
verifies that the result re-parses and compiles.  Test modules (unless
``include_tests``) and modules written for another engine are only reported
(:mod:`codemods.scope`).  Anything that goes wrong yields a
``FAILED`` result and the original bytes untouched; a file without hook calls is never
modified.
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper

from codemods import scope
from codemods.discover import find_calls
from codemods.options import TransformOptions
from codemods.prefilter import Prefilter
from codemods.records import Action, CallSite, FileResult, Status


def _parse(source: bytes) -> cst.Module:
    return cst.parse_module(source)


def _describe(error: Exception) -> str:
    if isinstance(error, cst.ParserSyntaxError):
        return f"syntax error at line {error.raw_line}, column {error.raw_column}: {error.message}"
    if isinstance(error, (UnicodeDecodeError, LookupError)) or (
        isinstance(error, SyntaxError) and "encoding" in str(error)
    ):
        return f"cannot decode the file: {error}"
    return f"{type(error).__name__}: {error}"


def _discover(module: cst.Module, path: str, options: TransformOptions) -> tuple[CallSite, ...]:
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # parsed here, used only here
    return tuple(found.site for found in find_calls(wrapper, path, options.hooks))


def _scan(
    source: bytes, path: str, options: TransformOptions, prefilter: bool
) -> tuple[FileResult, cst.Module | None]:
    if prefilter and not Prefilter.for_names(options.extra_hooks).needs_parse(source):
        return FileResult(path, Status.UNCHANGED, original=source), None
    try:
        module = _parse(source)
        sites = _discover(module, path, options)
        # call-in (scope): test modules and other engines' modules are reported, not rewritten
        if sites:
            reason = scope.module_skip_reason(
                module, path, options.hooks.names, include_tests=options.include_tests
            )
            sites = scope.skip_all(sites, reason)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file alone
        return FileResult(path, Status.FAILED, original=source, error=_describe(error)), None
    return FileResult(path, Status.UNCHANGED, sites, original=source), module


def scan_source(
    source: bytes, path: str, options: TransformOptions | None = None, *, prefilter: bool = True
) -> FileResult:
    """Discover call sites only; never rewrites.

    A file that the prefilter shows to hold no call site is not parsed (and so never fails);
    ``prefilter=False`` parses every file.
    """
    return _scan(source, path, options or TransformOptions(), prefilter)[0]


def _verify(rewritten: bytes, path: str) -> None:
    cst.parse_module(rewritten)
    compile(rewritten, path, "exec", dont_inherit=True)


def transform_source(
    source: bytes, path: str, options: TransformOptions | None = None, *, prefilter: bool = True
) -> FileResult:
    """Apply the caller codemods to one file's bytes (``prefilter`` as for ``scan_source``)."""
    options = options or TransformOptions()
    scanned, module = _scan(source, path, options, prefilter)
    if module is None:
        return scanned
    sites = scanned.call_sites
    needs = {action for site in sites for action in site.actions}
    if not needs & {Action.GUARD, Action.FALLBACK}:
        return scanned
    from codemods.fallback import FallbackTransformer
    from codemods.guard import GuardTransformer

    try:
        # The codemods work on their own copies: ``module`` itself is never changed.
        if Action.GUARD in needs:
            guard = GuardTransformer(path, options.guard_policy, options.extra_hooks)
            module = guard.transform_module(module)
        fallback = FallbackTransformer(path, options.fallback_policy, options.extra_hooks)
        module = fallback.transform_module(module)
        rewritten = module.bytes
        _verify(rewritten, path)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file alone
        return FileResult(
            path,
            Status.FAILED,
            sites,
            original=source,
            error=f"could not rewrite: {_describe(error)}",
        )
    if rewritten == source:
        return scanned
    return FileResult(path, Status.CHANGED, sites, original=source, rewritten=rewritten)
