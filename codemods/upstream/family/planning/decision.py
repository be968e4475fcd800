"""What the family planner decides per model file: :class:`FileDecision` (patched or not,
why, the decoder-stack forward that captures, the hooks and classes it covers), and
:class:`ForwardRef`, the forward a decision names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForwardRef:
    file: str
    class_name: str

    def __str__(self) -> str:
        return f"{self.file}:{self.class_name}.forward"


@dataclass(frozen=True)
class FileDecision:
    """What the family patch does with one model file that defines a capture hook."""

    file: str
    hooks: tuple[str, ...]  # "Class.hook" for every hook defined in the file
    early_return: tuple[str, ...]  # the hooks among them that return early off the last rank
    patched: bool
    reason: str
    forward: ForwardRef | None = None
    capture_kinds: tuple[str, ...] = ()
    #: (causal-LM class, decoder-stack class as named in this file, patched hooks)
    cases: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    #: The handoff: ``PPProxyTensors({...})`` ("dict") or ``PPProxyTensors(name)``.
    proxy_arg: str | None = None
    #: The last stage also captures its own output (the id past the last layer).
    final_capture: bool = False
    #: Other fixes the patch makes in the file, in words.
    fixes: tuple[str, ...] = ()
    #: Comments the rewrite makes stale (first line of each), for review by hand.
    stale_comments: tuple[str, ...] = ()
    #: "Class.hook" of the hooks whose early return the patch drops although the file is
    #: not patched: the model refuses PP in its constructor, so the return never runs
    #: (no capture hook decides by PP rank by itself); nothing else changes in the file.
    dead_returns: tuple[str, ...] = ()
    #: "file:Class" of the patched causal-LM class whose hooks the file's class (of
    #: ``cases``) inherits while it builds a decoder stack of its own (``subclass.py``).
    inherits: str | None = None

    @property
    def name(self) -> str:
        return self.file.removesuffix(".py")
