"""The tables both sides read, derived from the capture-method registry (:data:`METHODS`).

Each function takes the rows (the registry by default) so that a test can add a row and see
it in every table; the modules that use a table bind it once, from the registry.
"""

from __future__ import annotations

from collections.abc import Sequence

from codemods.catalog.hooks import METHODS, CaptureMethod

__all__ = [
    "ADMITTED",
    "EAGLE_PATH",
    "FALLBACK",
    "FALLBACK_TARGET",
    "HOOK_TITLES",
    "NATIVE",
    "PD_PREFILL",
    "RELAYED",
    "RELAY_HOOKS",
    "SPEC_CHECKS",
    "CaptureMethod",
    "Methods",
    "accepting_none",
    "admitted_names",
    "admitted_on_eagle_path",
    "admitted_on_pd_prefill",
    "by_family",
    "either",
    "hook_titles",
    "native_relay",
    "rejecting_none",
    "relay_hooks",
    "relayed",
    "relayed_names",
    "runner_fallback",
    "spec_checks",
]

Methods = Sequence[CaptureMethod]


def relayed(methods: Methods = METHODS) -> tuple[CaptureMethod, ...]:
    """The methods the upstream patch relays, in the order its declarations list them."""
    return tuple(sorted((m for m in methods if m.relay_order), key=lambda m: m.relay_order))


def relayed_names(methods: Methods = METHODS) -> tuple[str, ...]:
    """The relayed methods' names, in declaration order."""
    return tuple(method.name for method in relayed(methods))


def relay_hooks(methods: Methods = METHODS) -> dict[str, str]:
    """Capture hook -> its method, for the hooks whose rewrite relays a method."""
    return {method.hook: method.name for method in relayed(methods)}


def hook_titles(methods: Methods = METHODS) -> dict[str, str]:
    """Capture hook -> the short name a PR title gives its method."""
    return {method.hook: method.title or method.name for method in relayed(methods)}


def admitted_names(methods: Methods = METHODS) -> tuple[str, ...]:
    """The methods the validation change admits with PP, in declaration order."""
    return tuple(method.name for method in relayed(methods) if method.admitted_with_pp)


def admitted_on_eagle_path(methods: Methods = METHODS) -> CaptureMethod:
    """The admitted method whose drafter runs on the EAGLE worker: the validation change
    admits it where EAGLE runs with PP."""
    return _one(
        [m for m in relayed(methods) if m.admitted_with_pp and m.drafts_on_eagle_worker],
        "the validation change admits on EAGLE's path",
    )


def admitted_on_pd_prefill(methods: Methods = METHODS) -> tuple[CaptureMethod, ...]:
    """The admitted methods that follow the natively relayed method's path (PD prefill), in
    declaration order."""
    return tuple(m for m in relayed(methods) if m.admitted_with_pp and not m.drafts_on_eagle_worker)


def either(names: Sequence[str]) -> str:
    """``A``, ``A or B``, ``A, B or C``: the names as a sentence lists alternatives."""
    return " or ".join(filter(None, (", ".join(names[:-1]), *names[-1:])))


def spec_checks(methods: Methods = METHODS) -> frozenset[str]:
    """Speculative-algorithm checks whose truth means a drafter needs the capture."""
    return frozenset(
        check for method in methods for check in method.spec_checks or (f"is_{method.family}",)
    )


def rejecting_none(methods: Methods = METHODS) -> tuple[CaptureMethod, ...]:
    """The methods whose hooks reject ``None``, in registry order."""
    return tuple(method for method in methods if not method.accepts_none)


def accepting_none(methods: Methods = METHODS) -> tuple[CaptureMethod, ...]:
    """The methods whose hooks take ``None`` to mean default layers, in registry order."""
    return tuple(method for method in methods if method.accepts_none)


def _one(found: list[CaptureMethod], what: str) -> CaptureMethod:
    if len(found) != 1:
        raise ValueError(f"the registry needs exactly one method that {what}: {found}")
    return found[0]


def native_relay(methods: Methods = METHODS) -> CaptureMethod:
    """The method SGLang relays in its own model files (the Kimi models' relay)."""
    return _one([m for m in methods if m.relayed_natively], "SGLang relays natively")


def by_family(family: str, methods: Methods = METHODS) -> CaptureMethod:
    return _one([m for m in methods if m.family == family], f"is of family {family!r}")


def runner_fallback(methods: Methods = METHODS) -> tuple[CaptureMethod, CaptureMethod]:
    """(the method whose targets the runner configures through another's hook, that one)."""
    method = _one([m for m in methods if m.falls_back_to], "falls back to another hook")
    return method, by_family(method.falls_back_to, methods)


#: The tables, from the registry.
RELAYED = relayed_names()
RELAY_HOOKS = relay_hooks()
HOOK_TITLES = hook_titles()
ADMITTED = admitted_names()
SPEC_CHECKS = spec_checks()
EAGLE_PATH = admitted_on_eagle_path()
PD_PREFILL = admitted_on_pd_prefill()
NATIVE = native_relay()
FALLBACK, FALLBACK_TARGET = runner_fallback()
