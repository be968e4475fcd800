"""Small immutable records passed between pipeline stages.

``CallSite`` is what discovery finds in one module; ``FileResult`` is what the per-file
transform returns for one file.  Nothing here does work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import cast


class Shape(str, Enum):
    """How a hook is reached at a call site."""

    DIRECT = "direct"  # model.set_x_layers_to_capture(ids), any receiver chain
    UNBOUND = "unbound"  # SomeModel.set_x_layers_to_capture(model, ids)
    GETATTR = "getattr"  # getattr(obj, "set_x_layers_to_capture")(ids)
    VARIABLE = "variable"  # setter = getattr(obj, "set_x..."); ...; setter(ids)
    DICT_LOOKUP = "dict-lookup"  # name chosen from a dict literal of hook names
    LOOP = "loop"  # name taken from a loop over a tuple/list of hook names


class Risk(str, Enum):
    """Why a call site may fail at run time."""

    SAFE = "safe"  # literal ids, already guarded, or a hook that accepts None
    MAYBE_NONE = "maybe-none"  # the ids argument may be None for a hook that rejects it
    LITERAL_NONE = "literal-none"  # None passed verbatim to a hook that rejects it
    PP_UNSUPPORTED = "pp-unsupported"  # may raise NotImplementedError under PP
    #: Under PP some model's hook returns early on non-last ranks: the captures are lost
    #: without an error (EAGLE3, DFLASH, DSPARK on some models); ``auxcap upstream-patch``.
    PP_SILENT = "pp-silent"


class Action(str, Enum):
    """What migrate does (or did) at a call site: ``none``, ``review``, or the action of one
    caller codemod of :mod:`codemods.callers.rewrite.registry`.

    The two built-in codemods' actions are members; the action of any other registered
    codemod is accepted too (``Action("mark")``), so a new codemod needs no edit here: the
    registry names its codemods' actions with :func:`accept_actions`.
    """

    NONE = "none"
    GUARD = "guard"
    FALLBACK = "fallback"
    REVIEW = "review"  # needs a person: reported, not rewritten

    @classmethod
    def _missing_(cls, value: object) -> Action | None:
        if not isinstance(value, str) or value not in _accepted_actions:
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper().replace("-", "_")
        member._value_ = value
        return cast(Action, cls._value2member_map_.setdefault(value, member))


#: The actions of the registered caller codemods (:func:`accept_actions`).
_accepted_actions: frozenset[str] = frozenset()


def accept_actions(actions: Iterable[str]) -> None:
    """Make ``Action(value)`` accept exactly these action values besides its members: the
    registry (:mod:`codemods.callers.rewrite.registry`) calls it whenever its entries change."""
    global _accepted_actions
    _accepted_actions = frozenset(actions)


#: Start of the reason, in a call site's note, when the code around it needs the capture
#: (see :mod:`codemods.callers.analyse.required`).
REQUIRED_PREFIX = "capture required: "
#: Start of a call site's note when it is reported but left alone on purpose (a test module,
#: another engine, capture required; see :mod:`codemods.callers.scope`).
SKIP_PREFIX = "not rewritten: "


@dataclass(frozen=True)
class CallSite:
    """One hook call found by discovery; ``line`` and ``column`` are 1-based."""

    path: str
    line: int
    column: int
    hook: str  # hook name, or names joined with "|" when chosen at run time (``hooks``: a tuple)
    shape: Shape
    ids_source: str | None  # source text of the ids argument, None when absent
    risks: tuple[Risk, ...]
    guarded: bool  # behind a truthiness / None check of the ids
    handles_not_implemented: bool  # inside a try that handles NotImplementedError
    actions: tuple[Action, ...]
    note: str = ""

    @property
    def hooks(self) -> tuple[str, ...]:
        """The hook names the call may reach (sorted, as discovery joins them)."""
        return tuple(self.hook.split("|"))

    def to_dict(self) -> dict:
        """The scan JSON's call site: ``hook`` is the list of names (:attr:`hooks`)."""
        data = asdict(self)
        data["hook"] = list(self.hooks)
        data["shape"] = self.shape.value
        data["risks"] = [risk.value for risk in self.risks]
        data["actions"] = [action.value for action in self.actions]
        return data


@dataclass(frozen=True)
class SiteFacts:
    """What discovery knows about one call site, before any codemod is chosen for it: the
    input of each registry entry's test of whether its codemod applies (``Entry.applies``)."""

    #: The call site with its risks, hook, shape, ids and checks (its actions not yet set).
    site: CallSite
    #: The call is a statement of its own, or one that gets a line of its own before rewriting.
    movable: bool
    #: Why the call is not a statement of its own ("" when it is).
    not_own: str
    #: The hooks the call may reach that accept ``None`` (EAGLE3: default layers).
    lenient: tuple[str, ...]
    #: An expression at the call holds the hook name (``name`` in ``getattr(model, name)``).
    name_held: bool


@dataclass(frozen=True)
class Verdict:
    """A codemod's answer for one call site: it rewrites it (``applies``), or the call site
    needs a person (``review`` is set, possibly to "": the note says why), or neither."""

    applies: bool = False
    review: str | None = None


class Status(str, Enum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    FAILED = "failed"  # could not be read, parsed or rewritten: left byte-for-byte untouched


@dataclass(frozen=True)
class Step:
    """What one codemod did to one file: its input, its output, and the call sites it
    rewrote, as they stand in its input (the fallback's input is the guarded file)."""

    action: str  # the codemod's Action value
    before: bytes = field(repr=False)
    after: bytes = field(repr=False)
    sites: tuple[CallSite, ...] = ()


@dataclass(frozen=True)
class FileResult:
    """The outcome for one file; ``rewritten`` is set only when ``status`` is CHANGED, and
    ``steps`` (one per codemod that ran, in order) only then too."""

    path: str
    status: Status
    call_sites: tuple[CallSite, ...] = ()
    original: bytes | None = field(default=None, repr=False)
    rewritten: bytes | None = field(default=None, repr=False)
    error: str | None = None
    steps: tuple[Step, ...] = field(default=(), repr=False)

    def step(self, action: str) -> Step | None:
        return next((step for step in self.steps if step.action == action), None)

    @property
    def review_count(self) -> int:
        return sum(Action.REVIEW in site.actions for site in self.call_sites)


def is_skipped(site: CallSite) -> bool:
    """Reported but left alone on purpose (its note starts with :data:`SKIP_PREFIX`)."""
    return site.note.startswith(SKIP_PREFIX) and site.actions == (Action.NONE,)
