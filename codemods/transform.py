"""Per-file transform: bytes in, a :class:`~codemods.records.FileResult` out.

``transform_source`` parses the bytes with LibCST (so encoding, BOM and line endings are
kept), discovers the call sites, applies the guard and then the fallback codemod, and
verifies that the result re-parses and compiles.  Anything that goes wrong yields a
``FAILED`` result and the original bytes untouched; a file without hook calls is never
modified.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.metadata import MetadataWrapper

from codemods.discover import find_calls, mentions_hooks
from codemods.fallback import FALLBACK_POLICIES, FallbackCommand
from codemods.guard import GUARD_POLICIES, GuardCommand
from codemods.hooks import HookSet
from codemods.records import Action, CallSite, FileResult, Status


@dataclass(frozen=True)
class TransformOptions:
    """How ``migrate`` rewrites: the two policies and any user-added hook names."""

    guard_policy: str = "skip"
    fallback_policy: str = "warn"
    extra_hooks: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.guard_policy not in GUARD_POLICIES:
            raise ValueError(f"unknown guard policy {self.guard_policy!r}")
        if self.fallback_policy not in FALLBACK_POLICIES:
            raise ValueError(f"unknown fallback policy {self.fallback_policy!r}")
        HookSet.with_extra(self.extra_hooks)  # validates the names

    @property
    def hooks(self) -> HookSet:
        return HookSet.with_extra(self.extra_hooks)


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
    return tuple(found.site for found in find_calls(MetadataWrapper(module), path, options.hooks))


def scan_source(source: bytes, path: str, options: TransformOptions | None = None) -> FileResult:
    """Discover call sites only; never rewrites."""
    options = options or TransformOptions()
    if not mentions_hooks(source, options.hooks):
        return FileResult(path, Status.UNCHANGED, original=source)
    try:
        module = _parse(source)
        sites = _discover(module, path, options)
    except Exception as error:  # noqa: BLE001 - any failure leaves the file alone
        return FileResult(path, Status.FAILED, original=source, error=_describe(error))
    return FileResult(path, Status.UNCHANGED, sites, original=source)


def _verify(rewritten: bytes, path: str) -> None:
    cst.parse_module(rewritten)
    compile(rewritten, path, "exec", dont_inherit=True)


def transform_source(
    source: bytes, path: str, options: TransformOptions | None = None
) -> FileResult:
    """Apply the caller codemods to one file's bytes."""
    options = options or TransformOptions()
    scanned = scan_source(source, path, options)
    if scanned.status is Status.FAILED:
        return scanned
    sites = scanned.call_sites
    needs = {action for site in sites for action in site.actions}
    if not needs & {Action.GUARD, Action.FALLBACK}:
        return scanned
    try:
        module = _parse(source)
        if Action.GUARD in needs:
            context = CodemodContext(filename=path)
            guard = GuardCommand(context, options.guard_policy, options.extra_hooks)
            module = guard.transform_module(module)
        context = CodemodContext(filename=path)
        fallback = FallbackCommand(context, options.fallback_policy, options.extra_hooks)
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
