"""What a run of the caller codemods is asked to do: the two policies and the hook names.

Kept free of LibCST so that the command line can validate options (and answer ``--version``
or a run that needs no parsing) without loading the parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codemods.callers.rewrite.registry import FALLBACK, GUARD
from codemods.catalog.hooks import HookSet

#: Guard codemod: when the layer ids are unset, skip the call or raise a clear ValueError.
GUARD_POLICIES = GUARD.policy.names
#: Fallback codemod: under pipeline parallelism, warn and continue or re-raise with a hint.
FALLBACK_POLICIES = FALLBACK.policy.names


@dataclass(frozen=True)
class TransformOptions:
    """How ``migrate`` rewrites: the two policies and any user-added hook names."""

    guard_policy: str = "skip"
    fallback_policy: str = "warn"
    extra_hooks: tuple[str, ...] = field(default=())
    #: Rewrite test modules too (``--include-tests``); see :mod:`codemods.callers.scope`.
    include_tests: bool = False
    #: Longest line the codemods may add; None: the host project's configured line length,
    #: found from each file's path (88 when none is configured).
    line_length: int | None = None

    def __post_init__(self) -> None:
        if self.guard_policy not in GUARD_POLICIES:
            raise ValueError(f"unknown guard policy {self.guard_policy!r}")
        if self.fallback_policy not in FALLBACK_POLICIES:
            raise ValueError(f"unknown fallback policy {self.fallback_policy!r}")
        HookSet.with_extra(self.extra_hooks)  # validates the names
        if self.line_length is not None and self.line_length < 20:
            raise ValueError(f"line length {self.line_length} is too short")

    @property
    def hooks(self) -> HookSet:
        return HookSet.with_extra(self.extra_hooks)
