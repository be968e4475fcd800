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

And what to tell a user whose call raised it (:func:`pp_hint`): run with ``--pp-size 1``, and
apply ``auxcap upstream-patch`` only where that patch removes the error: for a hook whose every
raising setter (per the facts) lives in a model file the patch rewrites
(:data:`UPSTREAM_REWRITES`: Kimi-Linear's and Kimi-K3's DSPARK setters), never for DFLASH
(``qwen3_5_text`` raises, and the patch leaves that file alone) or a user-added hook.

Pure functions over hook names and :class:`~codemods.catalog.hooks.Hook` records; no LibCST.
"""

from __future__ import annotations

from collections.abc import Iterable

from codemods.catalog import hook_facts
from codemods.catalog.hooks import CATALOG, Hook

_CATALOG_NAMES = frozenset(hook.name for hook in CATALOG)

#: The model files (under ``sglang/srt/models``) whose setter raises ``NotImplementedError``
#: under PP and that ``auxcap upstream-patch`` rewrites so that it captures under PP instead
#: (its Kimi rewriters; the family patch leaves these files to them), with the model's name.
UPSTREAM_REWRITES = {"kimi_linear.py": "Kimi-Linear", "kimi_k3.py": "Kimi-K3"}

#: The hint when only running without PP helps.
PP_SIZE_HINT = "run with --pp-size 1"
#: The hint when the upstream patch also removes the error.
UPSTREAM_HINT = "run with --pp-size 1, or apply the upstream patch (auxcap upstream-patch)"


def can_raise_not_implemented(hook: Hook, releases: str | Iterable[str] | None = None) -> bool:
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


def upstream_fixes(hook: str) -> tuple[str, ...]:
    """The models (``("Kimi-K3", "Kimi-Linear")``) whose ``NotImplementedError`` under PP from
    ``hook`` the upstream patch removes, when it removes every one the release facts show for
    that hook; ``()`` when some raising setter is left as it is, or the facts do not know the
    hook (a user-added one) or show none."""
    if not hook_facts.is_known(hook):
        return ()
    files = {facts.file for facts in hook_facts.pp_raises(hook, None, "NotImplementedError")}
    if not files or not files <= UPSTREAM_REWRITES.keys():
        return ()
    return tuple(sorted(UPSTREAM_REWRITES[file] for file in files))


def pp_hint(hooks: Iterable[str]) -> str:
    """What to do about a ``NotImplementedError`` under PP from a call reaching ``hooks``:
    :data:`UPSTREAM_HINT` when the upstream patch fixes every one of them, else
    :data:`PP_SIZE_HINT`."""
    names = list(hooks)
    if names and all(upstream_fixes(name) for name in names):
        return UPSTREAM_HINT
    return PP_SIZE_HINT
