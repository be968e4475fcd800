"""Which capture hooks can raise ``NotImplementedError`` under pipeline parallelism.

The fallback codemod wraps a call in ``try/except NotImplementedError`` only when the call can
reach a hook that raises it; anywhere else the ``try`` is dead code.  The answer comes from the
facts derived from the SGLang release wheels (:mod:`codemods.catalog.hook_facts`), over every release
they cover unless ``releases`` narrows it:

- a catalog hook the facts know: whether some registered architecture's setter raises
  ``NotImplementedError`` under PP in one of those releases (DSPARK, DFLASH: yes; EAGLE3: no,
  its setters return early on non-last ranks instead);
- a user-added hook (``--hook NAME``) or a catalog hook the facts do not cover: treated like
  DSPARK, as able to raise whenever the catalog gives it a PP error.

Pure functions over hook names and :class:`~codemods.catalog.hooks.Hook` records; no LibCST.
"""

from __future__ import annotations

from collections.abc import Iterable

from codemods.catalog import hook_facts
from codemods.catalog.hooks import CATALOG, Hook

_CATALOG_NAMES = frozenset(hook.name for hook in CATALOG)


def can_raise_not_implemented(
    hook: Hook, releases: str | Iterable[str] | None = None
) -> bool:
    """Whether a call of ``hook`` can raise ``NotImplementedError`` under PP."""
    if hook.pp_error is None:
        return False
    if hook.name not in _CATALOG_NAMES or not hook_facts.is_known(hook.name):
        return True
    return hook_facts.may_raise_not_implemented(hook.name, releases)


def raising_hooks(
    hooks: Iterable[Hook], releases: str | Iterable[str] | None = None
) -> tuple[Hook, ...]:
    """The hooks among ``hooks`` (those a call site can reach) that can raise
    ``NotImplementedError`` under PP, in the given order."""
    return tuple(hook for hook in hooks if can_raise_not_implemented(hook, releases))


def loses_captures_silently(
    hooks: Iterable[Hook], releases: str | Iterable[str] | None = None
) -> bool:
    """Whether, under PP, a call reaching ``hooks`` can lose its captures without an error:
    some registered model's setter (per the release facts) returns early on non-last ranks.
    Hooks the facts do not know are not judged."""
    return any(
        hook_facts.is_known(hook.name) and hook_facts.loses_captures_silently(hook.name, releases)
        for hook in hooks
    )
