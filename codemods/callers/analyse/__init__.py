"""Find the call sites of capture hooks in one parsed module, and classify each.

The node-level entry point is :func:`find_calls`: given a :class:`libcst.MetadataWrapper`
it returns one :class:`FoundCall` per hook call (the ``libcst.Call`` node, its statement
when the call is a statement of its own, and the :class:`~codemods.callers.records.CallSite`
record).  The codemods reuse it, so what ``scan`` reports is exactly what ``migrate``
rewrites.

Shapes found (``records.Shape``)::

    model.set_dspark_layers_to_capture(ids)                    # DIRECT, any receiver chain
    KimiLinearForCausalLM.set_dspark_layers_to_capture(m, ids)  # UNBOUND
    getattr(model, "set_dspark_layers_to_capture")(ids)         # GETATTR
    setter = getattr(model, "set_dspark_...", None); setter(ids)  # VARIABLE
    getattr(model, {kind: "set_dspark_..."}.get(method))(ids)  # DICT_LOOKUP (or [method])
    for name in ("set_eagle3_...", "set_dspark_..."): getattr(model, name)(ids)  # LOOP

Risk, per call: the ids *may be None* when they are a parameter defaulting to None or
annotated ``Optional[...]``/``X | None``, an ``args.x``/``cfg.x``/``self.config.x`` field, a
name (or ``self.x``) assigned from None, ``a or b``, ``d.get(k)`` or ``getattr(o, n, None)``,
or literal ``None``; literal lists/tuples and fresh ``list(...)`` values are safe.  A call is
*guarded* behind ``if ids:``, ``if ids is not None``, an ``and`` including such a check, its
``else`` after ``if ids is None``, or after ``if not ids: raise|return|continue|break`` /
``assert ids``.  Hooks that accept None (EAGLE3) are never guarded; a call may raise
``NotImplementedError`` under PP when it can reach a hook that the release facts show raising
it (:mod:`codemods.catalog.pp_raise`: DSPARK, DFLASH, user-added hooks; never EAGLE3), unless the call
is inside a ``try`` that handles it.

Never reported: hook definitions, a hook that delegates to the same hook on another object
(or to another hook: calls inside a hook's own definition must keep raising on ``None``),
hook names in strings that are not getattr names, and mock attribute access
(``model.set_x.assert_called_once_with(...)``, ``mock.call.set_x(...)``).  Calls inside
``pytest.raises`` / ``assertRaises`` are reported with action ``none`` (:mod:`codemods.callers.scope`).
"""

from __future__ import annotations

from codemods.callers.analyse.sites import (
    Analysis,
    FoundCall,
    analyse,
    find_call_sites,
    find_calls,
    mentions_hooks,
)

__all__ = [
    "Analysis",
    "FoundCall",
    "analyse",
    "find_call_sites",
    "find_calls",
    "mentions_hooks",
]
