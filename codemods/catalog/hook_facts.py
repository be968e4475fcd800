"""What SGLang's capture-hook setters do, per release: the facts a caller rewrite rests on.

The data (``hook_facts.json`` next to this module, format in ``docs/hook-facts.md``) is derived
from the model files of the SGLang release wheels by ``scripts/derive_hook_facts.py``, and a
test re-derives it from the wheels so it cannot drift from them. This module only reads it
(standard library only, no torch).

Every question is asked of a hook name and, optionally, of some releases (``None``: all the
releases the data covers; a string: one; an iterable: several). Unless said otherwise the
answers count the setters that a registered architecture (an ``EntryClass`` of SGLang) reaches,
with delegation to an inner model's setter already followed::

    >>> may_raise_not_implemented("set_eagle3_layers_to_capture")
    False
    >>> none_meaning("set_eagle3_layers_to_capture")
    'default_layers'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA_FILE = Path(__file__).resolve().with_name("hook_facts.json")
FORMAT = 1

# What a setter does under pipeline parallelism (``pp``).
PP_RAISES = "raises"  # raises on some rank (``pp_raise`` says what)
PP_SKIPS = "skips_non_last_ranks"  # returns early on non-last ranks: captures silently lost
PP_RUNS = "runs"  # the same on every rank
# What ``None`` as the layer ids does (``none``).
NONE_REJECTED = "rejected"  # raises (``none_raise`` says what)
NONE_DEFAULT = "default_layers"  # picks default layers
NONE_IGNORED = "ignored"  # returns without capturing
NONE_UNCHECKED = "unchecked"  # not tested: used as a list (TypeError or worse)
NONE_MIXED = "mixed"  # setters of the hook disagree
# Either: the setter passes the call to an inner model the analysis could not resolve.
UNRESOLVED = "unresolved"

_PP_VALUES = {PP_RAISES, PP_SKIPS, PP_RUNS, UNRESOLVED}
_NONE_VALUES = {NONE_REJECTED, NONE_DEFAULT, NONE_IGNORED, NONE_UNCHECKED, NONE_MIXED, UNRESOLVED}


class HookFactsError(ValueError):
    """The data file is missing or malformed; the message names the file and the reason."""


class UnknownHook(KeyError):
    """No setter of that name is defined in any release the data covers."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown hook"


@dataclass(frozen=True)
class Raised:
    type: str
    message: str | None


@dataclass(frozen=True)
class SetterFacts:
    """One setter in one release. ``setter`` is ``"<file under sglang/srt/models>::<Class>"``."""

    hook: str
    release: str
    setter: str
    models: tuple[str, ...]
    pp: str
    pp_raise: Raised | None
    none: str
    none_raise: Raised | None
    via: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return self.setter.split("::", 1)[0]

    @property
    def cls(self) -> str:
        return self.setter.split("::", 1)[1]

    @property
    def registered(self) -> bool:
        """Reached by at least one registered architecture (not only an inner model)."""
        return bool(self.models)


def _raised(value: object, where: str) -> Raised | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise HookFactsError(f"{where}: expected {{'type': str, 'message': str|null}}")
    return Raised(value["type"], value.get("message"))


class HookFacts:
    """The facts of one data file (see the module docstring for the questions)."""

    def __init__(self, data: Mapping, source: str = "<data>"):
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise HookFactsError(f"{source}: not a hook facts file of format {FORMAT}")
        releases = data.get("releases")
        hooks = data.get("hooks")
        if not isinstance(releases, list) or not isinstance(hooks, Mapping):
            raise HookFactsError(f"{source}: 'releases' (list) and 'hooks' (object) required")
        self.source = source
        self.releases: tuple[str, ...] = tuple(releases)
        self._facts: dict[str, dict[str, list[SetterFacts]]] = {}
        for hook, setters in sorted(hooks.items()):
            per_release: dict[str, list[SetterFacts]] = {r: [] for r in self.releases}
            for setter, variants in sorted(setters.items()):
                for variant in variants:
                    where = f"{source}: {hook} {setter}"
                    try:
                        pp, none = variant["pp"], variant["none"]
                        rels = variant["releases"]
                        models = tuple(variant.get("models", ()))
                    except (KeyError, TypeError) as exc:
                        raise HookFactsError(f"{where}: missing field {exc}") from exc
                    if pp not in _PP_VALUES or none not in _NONE_VALUES:
                        raise HookFactsError(f"{where}: unknown value pp={pp!r} none={none!r}")
                    for release in rels:
                        if release not in per_release:
                            raise HookFactsError(f"{where}: release {release!r} not listed")
                        per_release[release].append(
                            SetterFacts(
                                hook=hook,
                                release=release,
                                setter=setter,
                                models=models,
                                pp=pp,
                                pp_raise=_raised(variant.get("pp_raise"), where),
                                none=none,
                                none_raise=_raised(variant.get("none_raise"), where),
                                via=tuple(variant.get("via", ())),
                                unresolved=tuple(variant.get("unresolved", ())),
                            )
                        )
            self._facts[hook] = per_release

    @classmethod
    def from_file(cls, path: Path | str) -> HookFacts:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise HookFactsError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise HookFactsError(f"{path}: not valid JSON: {exc}") from exc
        return cls(data, source=str(path))

    # -- selection
    def hooks(self) -> tuple[str, ...]:
        return tuple(self._facts)

    def is_known(self, hook: str) -> bool:
        return hook in self._facts

    def _releases(self, releases: str | Iterable[str] | None) -> tuple[str, ...]:
        if releases is None:
            return self.releases
        chosen = (releases,) if isinstance(releases, str) else tuple(releases)
        unknown = [r for r in chosen if r not in self.releases]
        if unknown:
            raise ValueError(
                f"unknown SGLang release {', '.join(unknown)}; the hook facts cover "
                f"{', '.join(self.releases)}"
            )
        return chosen

    def setters(
        self,
        hook: str,
        releases: str | Iterable[str] | None = None,
        *,
        registered_only: bool = True,
    ) -> tuple[SetterFacts, ...]:
        """The setters of ``hook`` in those releases (by default only the registered ones)."""
        if hook not in self._facts:
            raise UnknownHook(
                f"{hook!r} is not a capture hook of SGLang {self.releases[0]}-"
                f"{self.releases[-1]} (known: {', '.join(self._facts)})"
            )
        found = [
            facts
            for release in self._releases(releases)
            for facts in self._facts[hook][release]
            if facts.registered or not registered_only
        ]
        return tuple(found)

    def models(self, hook: str, release: str) -> tuple[str, ...]:
        """The registered architectures whose ``hook`` runs one of the release's setters."""
        return tuple(sorted({m for f in self.setters(hook, release) for m in f.models}))

    # -- under pipeline parallelism
    def pp_raises(
        self, hook: str, releases: str | Iterable[str] | None = None, exc_type: str | None = None
    ) -> tuple[SetterFacts, ...]:
        return tuple(
            f
            for f in self.setters(hook, releases)
            if f.pp == PP_RAISES
            and (exc_type is None or (f.pp_raise and f.pp_raise.type == exc_type))
        )

    def may_raise_not_implemented(
        self, hook: str, releases: str | Iterable[str] | None = None
    ) -> bool:
        """Whether some architecture's ``hook`` raises ``NotImplementedError`` under PP."""
        return bool(self.pp_raises(hook, releases, "NotImplementedError"))

    def loses_captures_silently(
        self, hook: str, releases: str | Iterable[str] | None = None
    ) -> bool:
        """Whether some architecture's ``hook`` returns early on non-last PP ranks."""
        return any(f.pp == PP_SKIPS for f in self.setters(hook, releases))

    # -- None as the layer ids
    def rejects_none(self, hook: str, releases: str | Iterable[str] | None = None) -> bool:
        """Whether some architecture's ``hook`` raises on ``None`` (explicitly)."""
        return any(f.none == NONE_REJECTED for f in self.setters(hook, releases))

    def none_messages(
        self, hook: str, releases: str | Iterable[str] | None = None
    ) -> tuple[str, ...]:
        """The distinct messages ``hook`` raises on ``None``."""
        return tuple(
            sorted(
                {
                    f.none_raise.message
                    for f in self.setters(hook, releases)
                    if f.none == NONE_REJECTED and f.none_raise and f.none_raise.message
                }
            )
        )

    def none_meaning(self, hook: str, releases: str | Iterable[str] | None = None) -> str:
        """What ``None`` does, over the registered setters the analysis resolved:
        ``default_layers`` / ``ignored`` when every one accepts it that way; ``rejected`` when
        none accepts it and some raise on it (``unchecked`` when none even tests it);
        ``mixed`` when some accept it and others fail; ``unresolved`` when nothing resolved."""
        outcomes = {f.none for f in self.setters(hook, releases)} - {UNRESOLVED}
        accepting = outcomes & {NONE_DEFAULT, NONE_IGNORED}
        failing = outcomes & {NONE_REJECTED, NONE_UNCHECKED}
        if not outcomes:
            return UNRESOLVED
        if NONE_MIXED in outcomes or (accepting and failing) or len(accepting) > 1:
            return NONE_MIXED
        if accepting:
            return accepting.pop()
        return NONE_REJECTED if NONE_REJECTED in failing else NONE_UNCHECKED


@lru_cache(maxsize=1)
def load() -> HookFacts:
    """The facts shipped with auxcap (read once)."""
    return HookFacts.from_file(DATA_FILE)


def hooks() -> tuple[str, ...]:
    return load().hooks()


def releases() -> tuple[str, ...]:
    return load().releases


def is_known(hook: str) -> bool:
    return load().is_known(hook)


def setters(
    hook: str, releases: str | Iterable[str] | None = None, *, registered_only: bool = True
) -> tuple[SetterFacts, ...]:
    return load().setters(hook, releases, registered_only=registered_only)


def models(hook: str, release: str) -> tuple[str, ...]:
    return load().models(hook, release)


def pp_raises(
    hook: str, releases: str | Iterable[str] | None = None, exc_type: str | None = None
) -> tuple[SetterFacts, ...]:
    return load().pp_raises(hook, releases, exc_type)


def may_raise_not_implemented(hook: str, releases: str | Iterable[str] | None = None) -> bool:
    return load().may_raise_not_implemented(hook, releases)


def loses_captures_silently(hook: str, releases: str | Iterable[str] | None = None) -> bool:
    return load().loses_captures_silently(hook, releases)


def rejects_none(hook: str, releases: str | Iterable[str] | None = None) -> bool:
    return load().rejects_none(hook, releases)


def none_messages(hook: str, releases: str | Iterable[str] | None = None) -> tuple[str, ...]:
    return load().none_messages(hook, releases)


def none_meaning(hook: str, releases: str | Iterable[str] | None = None) -> str:
    return load().none_meaning(hook, releases)
