"""The catalog of aux-hidden-state capture hooks.

Data, not logic: each entry says what a hook is called, whether ``None`` is an accepted
argument (and what it means), the errors the hook raises, and the fallback the caller
codemods apply.  Users extend the catalog with ``--hook NAME`` (treated as the strictest
kind: ``None`` rejected, PP error possible).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NONE_ERROR_DSPARK = "DSPARK requires explicit layer_ids for aux hidden capture."
PP_ERROR_DSPARK = "DSPARK aux hidden capture requires PP=1."


@dataclass(frozen=True)
class Hook:
    """One capture hook of a target model."""

    name: str
    family: str
    #: ``True`` when ``None`` (or no argument) is a valid call meaning "default layers".
    accepts_none: bool
    #: What ``None`` means when accepted, for reports.
    none_meaning: str
    #: The error raised for ``None`` when it is rejected (class name, message).
    none_error: tuple[str, str] | None
    #: The error raised under pipeline parallelism by models that refuse PP capture.
    pp_error: tuple[str, str] | None


#: Every capture hook SGLang defines follows this spelling (a regex, unanchored: the one
#: source of the patterns that look for hook names in text and bytes).
HOOK_NAME_FORM = r"set_[a-z0-9_]+_layers_to_capture"
HOOK_NAME_PATTERN = re.compile(f"^{HOOK_NAME_FORM}$")


@dataclass(frozen=True)
class CaptureMethod:
    """One capture method: one row of the registry both sides derive their tables from.

    The caller codemods' hook (:data:`CATALOG`), the upstream patch's hook-to-method tables,
    its relay declarations and PR texts, and the speculative checks that mean a drafter
    needs the capture all follow from these rows (:mod:`codemods.catalog.methods`).
    """

    #: ``dspark``: the hook is ``set_dspark_layers_to_capture``, the method ``DSPARK``.
    family: str
    #: What ``None`` means to the hook, for reports.
    none_meaning: str
    #: ``True`` when the hook takes ``None`` to mean "default layers".
    accepts_none: bool = False
    #: The short name PR titles give it (empty: :attr:`name`).
    title: str = ""
    #: Speculative-algorithm checks whose truth means the drafter needs its capture
    #: (empty: ``is_<family>``).
    spec_checks: tuple[str, ...] = ()
    #: Its place (1, 2, ...) in the ``pp_aux_relay_methods`` the upstream patch declares on
    #: the classes whose hook it rewrites; 0: the patch does not relay it.
    relay_order: int = 0
    #: The patch's server-argument validation change admits it with PP for the patched
    #: architectures (``validation/relax.py``).
    admitted_with_pp: bool = False
    #: Its drafter runs on SGLang's EAGLE worker: the validation change admits it with PP on
    #: EAGLE's path.  An admitted method that does not follows the path of the method SGLang
    #: relays natively (PD prefill only).
    drafts_on_eagle_worker: bool = False
    #: SGLang relays it across stages in its own model files (0.5.21+), which the patch moves
    #: onto the shared entry and declares on the classes that define its hook.
    relayed_natively: bool = False
    #: The family of the hook SGLang's runner configures for a target of this method that
    #: lacks this method's hook (empty: none).
    falls_back_to: str = ""

    @property
    def name(self) -> str:
        return self.family.upper()

    @property
    def hook(self) -> str:
        return f"set_{self.family}_layers_to_capture"


#: The capture methods, in the order the caller codemods list their hooks.  A new capture
#: method is one row here (and its fixtures).
METHODS: tuple[CaptureMethod, ...] = (
    CaptureMethod(
        "dspark",
        "rejected",
        relay_order=3,
        relayed_natively=True,
        falls_back_to="dflash",
    ),
    CaptureMethod(
        "dflash",
        "rejected by most models",
        title="DFlash",
        relay_order=2,
        admitted_with_pp=True,
    ),
    CaptureMethod(
        "eagle3",
        "default layers [2, n // 2, n - 3]",
        accepts_none=True,
        spec_checks=("is_eagle", "is_eagle3"),
        relay_order=1,
        admitted_with_pp=True,
        drafts_on_eagle_worker=True,
    ),
    CaptureMethod("msd", "rejected"),
)


def method_hook(method: CaptureMethod) -> Hook:
    """A method's hook: its name and its errors' texts follow from the family."""
    label = method.name
    return Hook(
        name=method.hook,
        family=method.family,
        accepts_none=method.accepts_none,
        none_meaning=method.none_meaning,
        none_error=None
        if method.accepts_none
        else ("ValueError", f"{label} requires explicit layer_ids for aux hidden capture."),
        pp_error=("NotImplementedError", f"{label} aux hidden capture requires PP=1."),
    )


#: set_dspark_layers_to_capture, set_dflash_..., set_eagle3_..., set_msd_layers_to_capture.
CATALOG: tuple[Hook, ...] = tuple(method_hook(method) for method in METHODS)


def custom_hook(name: str) -> Hook:
    """A user-added hook: treated as strictly as DSPARK."""
    if not name.isidentifier():
        raise ValueError(f"not a valid hook name: {name!r}")
    family = name
    match = re.match(r"^set_(.+)_layers_to_capture$", name)
    if match:
        family = match.group(1)
    return Hook(
        name=name,
        family=family,
        accepts_none=False,
        none_meaning="rejected",
        none_error=("ValueError", f"{name} requires explicit layer ids."),
        pp_error=("NotImplementedError", f"{name} requires PP=1."),
    )


@dataclass(frozen=True)
class HookSet:
    """The hooks one run looks for: the catalog plus any user-added names."""

    hooks: tuple[Hook, ...] = CATALOG

    @classmethod
    def with_extra(cls, names: tuple[str, ...] | list[str] = ()) -> HookSet:
        known = {hook.name for hook in CATALOG}
        extra = tuple(custom_hook(name) for name in dict.fromkeys(names) if name not in known)
        return cls(CATALOG + extra)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(hook.name for hook in self.hooks)

    def get(self, name: str) -> Hook | None:
        for hook in self.hooks:
            if hook.name == name:
                return hook
        return None


DEFAULT_HOOKS = HookSet()
