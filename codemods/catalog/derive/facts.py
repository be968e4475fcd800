"""The facts of every setter of one tree: ``pp`` and ``none`` (with what is raised), the
delegates followed (``via``) or not resolved (``unresolved``), and the registered
architectures that reach the setter (``models``)."""

from __future__ import annotations

import ast
from pathlib import Path

from codemods.catalog.derive.index import ClassKey, ModelIndex
from codemods.catalog.derive.walk import (
    _NONE,
    _PP_LAST,
    _PP_NON_LAST,
    HOOK_RE,
    _Event,
    _Walker,
)


class Analyser:
    """Facts of every setter in one tree, with delegation followed (memoised, cycle-safe)."""

    def __init__(self, index: ModelIndex):
        self.index = index
        self._memo: dict[tuple[ClassKey, str], dict] = {}
        self._active: set[tuple[ClassKey, str]] = set()

    def setter_facts(self, cls: ClassKey, hook: str) -> dict:
        key = (cls, hook)
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            return {"pp": "unresolved", "none": "unresolved"}
        found = self.index.method(cls, hook)
        if found is None:
            return {"pp": "unresolved", "none": "unresolved"}
        self._active.add(key)
        try:
            facts = self._analyse(cls, found[1], hook)
        finally:
            self._active.discard(key)
        self._memo[key] = facts
        return facts

    def _delegates(self, walker: _Walker, call: ast.Call) -> list[dict] | None:
        func = call.func
        assert isinstance(func, ast.Attribute)
        targets = walker.receiver_classes(func.value)
        if not targets:
            return None
        results = []
        for target in targets:
            if self.index.method(target, func.attr) is None:
                continue
            results.append(
                {
                    **self.setter_facts(target, func.attr),
                    "_id": _setter_id(self.index, target, func.attr),
                }
            )
        return results or None

    def _analyse(self, cls: ClassKey, func: ast.FunctionDef, hook: str) -> dict:
        walker = _Walker(self.index, cls, func)
        facts: dict = {}
        via: set[str] = set()
        unresolved: set[str] = set()

        def delegate_of(event: _Event) -> list[dict] | None:
            assert event.call is not None
            found = self._delegates(walker, event.call)
            if found is None:
                unresolved.add(ast.unparse(event.call.func))
            else:
                via.update(d["_id"] for d in found)
            return found

        def delegated(event: _Event, combine) -> tuple[str, dict | None]:
            """What the hooks a call delegates to do, combined; "unresolved" when the
            delegates cannot be found."""
            found = delegate_of(event)
            return ("unresolved", None) if found is None else combine(found)

        # Under PP: the first loud failure on any rank wins; else silent loss on non-last ranks.
        outcomes = []
        for scen in (_PP_NON_LAST, _PP_LAST):
            state: dict = {}
            event = walker.run(func.body, scen, state)
            outcomes.append((event, state))
        pp, pp_raise = "runs", None
        raised = next((e for e, _state in outcomes if e is not None and e.kind == "raise"), None)
        if raised is not None:
            pp, pp_raise = "raises", _raised(raised)
        else:
            event, state = outcomes[0]
            if event is not None and event.kind == "return" or state.get("pp_skipped"):
                pp = "skips_non_last_ranks"
            elif event is not None and event.kind == "delegate":
                pp, pp_raise = delegated(event, _worst_pp)
        _record(facts, "pp", pp, pp_raise)

        # With None ids (no PP).
        event = walker.run(func.body, _NONE, {})
        none, none_raise = _NONE_MEANING.get(event.kind if event else "", "unchecked"), None
        if event is not None and event.kind == "raise":
            none, none_raise = "rejected", _raised(event)
        elif event is not None and event.kind == "delegate":
            none, none_raise = delegated(event, _common_none)
        _record(facts, "none", none, none_raise)
        if via:
            facts["via"] = sorted(via)
        if unresolved:
            facts["unresolved"] = sorted(unresolved)
        return facts


_PP_RANK = {"raises": 3, "unresolved": 2, "skips_non_last_ranks": 1, "runs": 0}


#: What a hook does with None ids, by the first event of its body: it uses its default
#: layers, or returns without capturing.
_NONE_MEANING = {"default": "default_layers", "return": "ignored"}


def _raised(event: _Event) -> dict:
    return {"type": event.exc, "message": event.message}


def _record(facts: dict, key: str, value: str, raised: dict | None) -> None:
    """``facts[key]``, and ``facts[key + "_raise"]`` when the hook raises."""
    facts[key] = value
    if raised is not None:
        facts[f"{key}_raise"] = raised


def _worst_pp(found: list[dict]) -> tuple[str, dict | None]:
    worst = max(found, key=lambda d: _PP_RANK[d["pp"]])
    return worst["pp"], worst.get("pp_raise")


def _common_none(found: list[dict]) -> tuple[str, dict | None]:
    kinds = {d["none"] for d in found}
    if len(kinds) == 1:
        return found[0]["none"], found[0].get("none_raise")
    return "mixed", None


def _setter_id(index: ModelIndex, cls: ClassKey, hook: str) -> str:
    found = index.method(cls, hook)
    owner = found[0] if found else cls
    return f"{owner[0]}::{owner[1]}.{hook}"


def derive(index: ModelIndex) -> dict[str, dict[str, dict]]:
    """``{hook: {"<file>::<Class>": facts}}`` for every setter defined in the tree."""
    analyser = Analyser(index)
    result: dict[str, dict[str, dict]] = {}
    for rel, module in sorted(index.modules.items()):
        for name, cls in sorted(module.classes.items()):
            for node in cls.body:
                if isinstance(node, ast.FunctionDef) and HOOK_RE.match(node.name):
                    facts = dict(analyser.setter_facts((rel, name), node.name))
                    facts["models"] = []
                    result.setdefault(node.name, {})[f"{rel}::{name}"] = facts
    for rel, module in sorted(index.modules.items()):
        for entry in module.entry:
            key = index.resolve(rel, entry)
            if key is None:
                continue
            for hook, setters in result.items():
                found = index.method(key, hook)
                owners = (
                    [found[0]]
                    if found is not None
                    else [
                        target[0]
                        for target in (index.method(c, hook) for c in index.forwarded_classes(key))
                        if target is not None
                    ]
                )
                for owner_key in owners:
                    owner = f"{owner_key[0]}::{owner_key[1]}"
                    if owner in setters and entry not in setters[owner]["models"]:
                        setters[owner]["models"].append(entry)
    for setters in result.values():
        for facts in setters.values():
            facts["models"].sort()
    return result


def derive_release(root: Path) -> dict[str, dict[str, dict]]:
    return derive(ModelIndex.from_tree(root))
