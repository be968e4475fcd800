"""What one part of the upstream patch is, and what it answers about a tree.

The generator (``generate.py``) is a loop over the parts of ``parts.PARTS``.  Each part
looks at the SGLang tree and answers with one :class:`Decision`:

* **applies**: its file changes and notes (an empty list of changes: the tree already
  carries what the part adds);
* **not applicable**, and why ("kimi_linear.py has no DSPARK hook in this release");
* **left out**: the part would apply, but it is not part of this patch (not asked for with
  ``--models``, or a structure auxcap does not rewrite), with what that leaves broken;
  the patch is partial and says so;
* **cannot apply**: the part applies but cannot be completed, naming the file and what it
  did not recognise; the run fails (exit 2).

A part that patches one model file says what it found there in a :class:`ModelState`
(``Decision.model``): the CLI, the texts, the series and ``auxcap sglang`` read these
answers, never a part's module.  Parts never import the registry or each other; what one
part needs from an earlier one it reads from the :class:`Plan` (``plan.facts(name)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.tree.sglang_tree import SGLangTree

#: What a model part found in its file: the rewrite is needed, already there, or the
#: release carries the captures across PP itself.
NEEDS_PATCH = "needs_patch"
PATCHED = "patched"
SUPPORTED = "supported"


class Verdict(Enum):
    APPLIES = "applies"
    NOT_APPLICABLE = "not applicable"
    LEFT_OUT = "left out"
    CANNOT_APPLY = "cannot apply"


T = TypeVar("T")


@dataclass(frozen=True)
class FactsKey(Generic[T]):
    """The facts of part ``part``: a value of ``kind``."""

    part: str
    kind: type[T]

    def read(self, facts: Any) -> T | None:
        """``facts`` as the part's type; a value of another type is a bug in the part."""
        if facts is None:
            return None
        if not isinstance(facts, self.kind):
            raise TypeError(
                f"the {self.part!r} part's facts are a {type(facts).__name__}, "
                f"not a {self.kind.__name__}"
            )
        return facts


@dataclass(frozen=True)
class ModelState:
    """What a part that rewrites one model file found there."""

    #: Patch path of the model file.
    path: str
    #: ``NEEDS_PATCH``, ``PATCHED`` or ``SUPPORTED``.
    status: str
    #: The capture hooks the rewrite changes (when it is needed).
    hooks: tuple[str, ...] = ()
    #: The model's name in texts ("Kimi-K3").
    title: str = ""

    @property
    def file(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return self.file.removesuffix(".py")


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    changes: tuple[FileChange, ...] = ()
    notes: tuple[str, ...] = ()
    #: Why the part does not apply, is left out or cannot be completed.
    reason: str = ""
    #: The file a part that cannot apply did not recognise.
    file: str | None = None
    #: What a part left out leaves broken.
    breaks: str = ""
    #: What a model part found in its file (None: not a model part, or no file or hook;
    #: set also when the part is left out or not asked for).
    model: ModelState | None = None
    #: Anything a later part or the texts read from this one (the family plan, the
    #: validation result ...).
    facts: Any = None

    @property
    def applies(self) -> bool:
        return self.verdict is Verdict.APPLIES

    def describe(self) -> str:
        """The answer in words, for the CLI."""
        if self.verdict is Verdict.APPLIES:
            return "applies"
        if self.verdict is Verdict.LEFT_OUT:
            return f"left out: {self.reason}; {self.breaks}"
        if self.verdict is Verdict.CANNOT_APPLY:
            return f"cannot apply: {self.reason}"
        return f"not applicable: {self.reason}"


def applies(
    changes: Sequence[FileChange] = (),
    notes: Sequence[str] = (),
    *,
    model: ModelState | None = None,
    facts: Any = None,
) -> Decision:
    return Decision(Verdict.APPLIES, tuple(changes), tuple(notes), model=model, facts=facts)


def not_applicable(
    reason: str,
    notes: Sequence[str] = (),
    *,
    model: ModelState | None = None,
    facts: Any = None,
) -> Decision:
    return Decision(
        Verdict.NOT_APPLICABLE, notes=tuple(notes), reason=reason, model=model, facts=facts
    )


def left_out(
    reason: str, breaks: str, *, model: ModelState | None = None, facts: Any = None
) -> Decision:
    return Decision(Verdict.LEFT_OUT, reason=reason, breaks=breaks, model=model, facts=facts)


def cannot_apply(file: str, reason: str) -> Decision:
    return Decision(Verdict.CANNOT_APPLY, reason=reason, file=file)


@dataclass
class Plan:
    """What a part is asked: the tree, the model files asked for (``None``: all), and the
    answers of the parts decided before it."""

    tree: SGLangTree
    models: list[str] | None = None
    #: Model file stems a part of their own rewrites (``Part.models``).
    owned: frozenset[str] = frozenset()
    decided: dict[str, Decision] = field(default_factory=dict)
    #: ``progress(phase, done, total)``: what a part is doing, for a progress bar.
    progress: Callable[[str, int, int], None] | None = None

    def report(self, phase: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(phase, done, total)

    def asked(self, stem: str) -> bool:
        """Whether model file ``<stem>.py`` is part of this patch."""
        return self.models is None or stem in self.models

    def facts(self, key: FactsKey[T]) -> T | None:
        """The facts of the part ``key`` names, decided before (None: none)."""
        decision = self.decided.get(key.part)
        return None if decision is None else key.read(decision.facts)

    def changed_paths(self) -> set[str]:
        return {c.path for d in self.decided.values() for c in d.changes}

    def text(self, path: str) -> str | None:
        """The text of ``path`` as the parts decided so far leave it (the tree's when none
        changed it): a part that changes a file an earlier part changed builds on this."""
        for decision in reversed(list(self.decided.values())):
            for change in reversed(decision.changes):
                if change.path == path:
                    return change.new
        return self.tree.read_text(path)


@dataclass(frozen=True)
class Part:
    """One part of the upstream patch: its name and how it decides."""

    name: str
    decide: Callable[[SGLangTree, Plan], Decision]
    #: Model file stems the part owns (``--models`` names them), if it owns any.
    models: tuple[str, ...] = ()
