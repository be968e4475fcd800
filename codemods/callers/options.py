"""What a run of the caller codemods is asked to do: one policy per registered codemod and the
hook names.

Kept free of LibCST so that the command line can validate options (and answer ``--version``
or a run that needs no parsing) without loading the parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import CodemodMetadata
from codemods.catalog.hooks import HookSet

#: Guard codemod: when the layer ids are unset, skip the call or raise a clear ValueError.
GUARD_POLICIES = registry.GUARD.policy.names
#: Fallback codemod: under pipeline parallelism, warn and continue or re-raise with a hint.
FALLBACK_POLICIES = registry.FALLBACK.policy.names


def _policies(
    given: Mapping[str, str] | tuple[tuple[str, str], ...] | None, named: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    """``(codemod id, policy)`` for every registered codemod: ``given`` (keyed by codemod
    id), then ``named`` (keyed by policy option, ``guard_policy="raise"``), else the default."""
    chosen = dict(given or {})
    by_dest = {metadata.policy.dest: metadata for metadata in registry.CODEMODS}
    for dest, value in named.items():
        if dest not in by_dest:
            raise TypeError(f"TransformOptions got an unexpected keyword argument {dest!r}")
        chosen[by_dest[dest].id] = value
    known = {metadata.id: metadata for metadata in registry.CODEMODS}
    for codemod_id, value in chosen.items():
        metadata = known.get(codemod_id)
        if metadata is None:
            raise ValueError(f"unknown codemod {codemod_id!r}")
        if value not in metadata.policy.names:
            raise ValueError(f"unknown {metadata.policy.label} {value!r}")
    return tuple(
        (metadata.id, chosen.get(metadata.id, metadata.policy.default))
        for metadata in registry.CODEMODS
    )


@dataclass(frozen=True, init=False)
class TransformOptions:
    """How ``migrate`` rewrites: the policy of each registered codemod (keyword
    ``<flag>_policy=...``, e.g. ``guard_policy="raise"``, or ``policies={codemod id:
    policy}``; read back as ``options.guard_policy`` or :meth:`policy`) and any user-added
    hook names."""

    #: ``(codemod id, policy)`` for each registered codemod, in the registry's order.
    policies: tuple[tuple[str, str], ...]
    extra_hooks: tuple[str, ...] = field(default=())
    #: Rewrite test modules too (``--include-tests``); see :mod:`codemods.callers.scope`.
    include_tests: bool = False
    #: Longest line the codemods may add; None: the host project's configured line length,
    #: found from each file's path (88 when none is configured).
    line_length: int | None = None

    def __init__(
        self,
        *,
        extra_hooks: tuple[str, ...] = (),
        include_tests: bool = False,
        line_length: int | None = None,
        policies: Mapping[str, str] | tuple[tuple[str, str], ...] | None = None,
        **named_policies: str,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "policies", _policies(policies, named_policies))
        set_field(self, "extra_hooks", tuple(extra_hooks))
        set_field(self, "include_tests", include_tests)
        set_field(self, "line_length", line_length)
        HookSet.with_extra(self.extra_hooks)  # validates the names
        if self.line_length is not None and self.line_length < 20:
            raise ValueError(f"line length {self.line_length} is too short")

    def policy(self, metadata: CodemodMetadata) -> str:
        """The policy chosen for ``metadata``'s codemod (its default when not registered when
        these options were made)."""
        return dict(self.policies).get(metadata.id, metadata.policy.default)

    def __getattr__(self, name: str) -> str:
        # ``options.guard_policy``: a codemod's policy by its option's name.
        for metadata in registry.CODEMODS:
            if metadata.policy.dest == name:
                return self.policy(metadata)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def hooks(self) -> HookSet:
        return HookSet.with_extra(self.extra_hooks)
