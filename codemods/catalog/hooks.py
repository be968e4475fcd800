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


def _sglang_hook(family: str, none_meaning: str, accepts_none: bool = False) -> Hook:
    """A hook SGLang defines: its name and its errors' texts follow from the family."""
    label = family.upper()
    return Hook(
        name=f"set_{family}_layers_to_capture",
        family=family,
        accepts_none=accepts_none,
        none_meaning=none_meaning,
        none_error=None
        if accepts_none
        else ("ValueError", f"{label} requires explicit layer_ids for aux hidden capture."),
        pp_error=("NotImplementedError", f"{label} aux hidden capture requires PP=1."),
    )


#: set_dspark_layers_to_capture, set_dflash_..., set_eagle3_..., set_msd_layers_to_capture.
CATALOG: tuple[Hook, ...] = (
    _sglang_hook("dspark", "rejected"),
    _sglang_hook("dflash", "rejected by most models"),
    _sglang_hook("eagle3", "default layers [2, n // 2, n - 3]", accepts_none=True),
    _sglang_hook("msd", "rejected"),
)


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
