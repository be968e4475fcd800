#!/usr/bin/env python3
"""Derive the capture-hook facts of SGLang releases from their model files (static analysis).

For every capture-hook setter (``set_<name>_layers_to_capture``) defined on a class in
``sglang/srt/models/**/*.py`` the analysis walks the setter body twice, the way it would run:

* **under PP** (pipeline world size 2, once as a non-last and once as the last rank, with a
  list of layer ids): the first ``raise`` reached (or ``assert`` that fails) gives
  ``pp: "raises"`` with the exception type and message; a ``return`` reached, or work skipped
  by a rank test, on a non-last rank gives ``pp: "skips_non_last_ranks"`` (the captures of
  that rank are silently lost); a setter that runs the same on every rank gives
  ``pp: "runs"``;
* **with ``None``** (no PP, last rank): the first ``raise`` reached gives ``none: "rejected"``
  with type and message; a completed branch taken because the ids are ``None`` gives
  ``none: "default_layers"``; a ``return`` there gives ``none: "ignored"``; no test of the ids
  at all gives ``none: "unchecked"`` (``None`` is used as a list).

Tests the walk cannot decide (``if self.language_model is None``, a config flag) are taken as
false, so only the ordinary path of the setter counts. A call of a setter on ``self`` or on
``self.<attr>`` (where a method assigns ``self.<attr>`` an instance of a model class, directly,
through a factory method or from a module-level table of classes) is followed into the
delegate's setter, across files; a delegate that cannot be resolved gives ``"unresolved"``.
``models`` lists the ``EntryClass`` classes (the architectures SGLang registers) whose method
resolution reaches the setter, or whose ``__getattr__`` forwards to an instance that has it.

Usage::

    python scripts/derive_hook_facts.py                 # derive all releases, write the JSON
    python scripts/derive_hook_facts.py --check         # exit 1 if the JSON is out of date
    python scripts/derive_hook_facts.py --tree 0.5.23=/path/to/unpacked/root ...

Release trees come from the wheel cache of ``tests/sglang_support/env.py`` unless given with
``--tree``. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DATA_FILE = PROJECT_ROOT / "codemods" / "catalog" / "hook_facts.json"
RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
MODELS_DIR = ("sglang", "srt", "models")
FORMAT = 1

HOOK_RE = re.compile(r"^set_[a-z0-9_]+_layers_to_capture$")
_PP_NAME_RE = re.compile(r"(^|_)pp($|_)|pipeline")
_PP_SIZE_RE = re.compile(r"^(pp_size|pp_world_size|pipeline_parallel_size)$")

ClassKey = tuple[str, str]  # (module path relative to the models dir, class name)


class HookFactsError(RuntimeError):
    """A model file or release tree that cannot be analysed (names the file and the reason)."""


# --------------------------------------------------------------------------- index of modules


@dataclass
class _Module:
    rel: str
    dotted: str
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (dotted, name)
    entry: list[str] = field(default_factory=list)
    globals: dict[str, ast.expr] = field(default_factory=dict)  # module-level NAME = value


def _entry_names(value: ast.expr) -> list[str]:
    items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return [item.id for item in items if isinstance(item, ast.Name)]


def _parse_module(rel: str, dotted: str, source: str, path: str) -> _Module:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise HookFactsError(f"{path}: cannot parse: {exc.msg} (line {exc.lineno})") from exc
    module = _Module(rel=rel, dotted=dotted)
    package = dotted.rsplit(".", 1)[0]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            module.classes[node.name] = node
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                module.imports[alias.asname or alias.name] = (base, alias.name)
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets):
                module.entry = _entry_names(node.value)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    module.globals[target.id] = node.value
    return module


class ModelIndex:
    """All model modules of one tree, with class lookup across their imports."""

    def __init__(self, modules: Iterable[_Module]):
        self.modules = {m.rel: m for m in modules}
        self._by_dotted = {m.dotted: m for m in self.modules.values()}

    @classmethod
    def from_sources(cls, sources: Mapping[str, str], package: str = "models") -> ModelIndex:
        """``sources``: path relative to the models dir (``"llama.py"``) -> source text."""
        modules = []
        for rel, text in sorted(sources.items()):
            dotted = package + "." + rel[: -len(".py")].replace("/", ".")
            modules.append(_parse_module(rel, dotted, text, rel))
        return cls(modules)

    @classmethod
    def from_tree(cls, root: Path) -> ModelIndex:
        models = root.joinpath(*MODELS_DIR)
        if not models.is_dir():
            raise HookFactsError(f"{root}: no {'/'.join(MODELS_DIR)} directory")
        modules = []
        for path in sorted(models.rglob("*.py")):
            rel = path.relative_to(models).as_posix()
            try:
                text = path.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError) as exc:
                raise HookFactsError(f"{path}: cannot read: {exc}") from exc
            dotted = ".".join(MODELS_DIR) + "." + rel[: -len(".py")].replace("/", ".")
            modules.append(_parse_module(rel, dotted, text, str(path)))
        return cls(modules)

    def resolve(self, rel: str, name: str, depth: int = 0) -> ClassKey | None:
        module = self.modules.get(rel)
        if module is None or depth > 8:
            return None
        if name in module.classes:
            return (rel, name)
        if name in module.imports:
            dotted, original = module.imports[name]
            target = self._by_dotted.get(dotted)
            if target is not None:
                return self.resolve(target.rel, original, depth + 1)
        return None

    def classdef(self, key: ClassKey) -> ast.ClassDef:
        return self.modules[key[0]].classes[key[1]]

    def mro(self, key: ClassKey) -> list[ClassKey]:
        order: list[ClassKey] = []
        stack = [key]
        while stack:
            current = stack.pop(0)
            if current in order:
                continue
            order.append(current)
            for base in self.classdef(current).bases:
                if isinstance(base, ast.Name):
                    resolved = self.resolve(current[0], base.id)
                    if resolved is not None:
                        stack.append(resolved)
        return order

    def method(self, key: ClassKey, name: str) -> tuple[ClassKey, ast.FunctionDef] | None:
        for cls in self.mro(key):
            for node in self.classdef(cls).body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    return cls, node
        return None

    def attribute_classes(self, key: ClassKey, attr: str) -> list[ClassKey]:
        """Classes whose instance a method along the MRO assigns to ``self.<attr>``: a call of a
        class (``SomeClass(...)``), of a local bound to classes (``cls = A if c else B``), or of
        a factory method on ``self`` whose returns are such calls (``self.init_llm(...)``)."""
        found: list[ClassKey] = []
        for cls in self.mro(key):
            for method, node in _assignments(self.classdef(cls)):
                if not any(
                    isinstance(target, ast.Attribute)
                    and target.attr == attr
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    for target in node.targets
                ):
                    continue
                for resolved in self._instances(key, cls[0], node.value, method, 0):
                    if resolved not in found:
                        found.append(resolved)
        return found

    def forwarded_classes(self, key: ClassKey) -> list[ClassKey]:
        """Classes a ``__getattr__`` of the class forwards to: ``getattr(self.<attr>, name)``."""
        found = self.method(key, "__getattr__")
        if found is None:
            return []
        classes: list[ClassKey] = []
        for node in ast.walk(found[1]):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and node.args
                and isinstance(node.args[0], ast.Attribute)
                and isinstance(node.args[0].value, ast.Name)
                and node.args[0].value.id == "self"
            ):
                for cls in self.attribute_classes(key, node.args[0].attr):
                    if cls not in classes:
                        classes.append(cls)
        return classes

    def _instances(self, key: ClassKey, rel: str, expr: ast.expr,
                   func: ast.FunctionDef | None, depth: int) -> list[ClassKey]:
        """Classes whose instance ``expr`` (in ``func`` of module ``rel``) can be."""
        if depth > 12:
            return []
        if isinstance(expr, ast.IfExp):
            return (self._instances(key, rel, expr.body, func, depth + 1)
                    + self._instances(key, rel, expr.orelse, func, depth + 1))
        if isinstance(expr, ast.Call):
            return self._classes(key, rel, expr.func, func, depth + 1)
        if isinstance(expr, ast.Name) and func is not None:
            return [c for value in _local_values(func, expr.id)
                    for c in self._instances(key, rel, value, func, depth + 1)]
        return []

    def _classes(self, key: ClassKey, rel: str, expr: ast.expr,
                 func: ast.FunctionDef | None, depth: int) -> list[ClassKey]:
        """Classes whose instance calling ``expr`` gives."""
        if depth > 12:
            return []
        if isinstance(expr, ast.IfExp):
            return (self._classes(key, rel, expr.body, func, depth + 1)
                    + self._classes(key, rel, expr.orelse, func, depth + 1))
        if isinstance(expr, ast.Name):
            resolved = self.resolve(rel, expr.id)
            if resolved is not None:
                return [resolved]
            if func is None:
                return []
            return [c for value in _local_values(func, expr.id)
                    for c in self._classes(key, rel, value, func, depth + 1)]
        # A class picked from a module-level table: TABLE.get(k) or TABLE[k].
        table = None
        if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and expr.func.attr == "get" and isinstance(expr.func.value, ast.Name)):
            table = expr.func.value.id
        elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
            table = expr.value.id
        if table is not None:
            value = self.modules[rel].globals.get(table) if rel in self.modules else None
            if isinstance(value, ast.Dict):
                return [c for item in value.values
                        for c in self._classes(key, rel, item, None, depth + 1)]
            return []
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and expr.value.id == "self"
        ):
            found = self.method(key, expr.attr)
            if found is None:
                return []
            owner, method = found
            return [c for node in ast.walk(method)
                    if isinstance(node, ast.Return) and node.value is not None
                    for c in self._instances(key, owner[0], node.value, method, depth + 1)]
        return []


def _assignments(cls: ast.ClassDef) -> list[tuple[ast.FunctionDef, ast.Assign]]:
    return [(method, node) for method in cls.body if isinstance(method, ast.FunctionDef)
            for node in ast.walk(method) if isinstance(node, ast.Assign)]


def _local_values(func: ast.FunctionDef, name: str) -> list[ast.expr]:
    return [node.value for node in ast.walk(func) if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)]


# --------------------------------------------------------------------------- walking a setter


@dataclass(frozen=True)
class _Scenario:
    pp: bool
    last_rank: bool
    ids_none: bool


_PP_NON_LAST = _Scenario(pp=True, last_rank=False, ids_none=False)
_PP_LAST = _Scenario(pp=True, last_rank=True, ids_none=False)
_NONE = _Scenario(pp=False, last_rank=True, ids_none=True)


@dataclass
class _Event:
    kind: str  # raise | return | delegate | default | uses
    exc: str | None = None
    message: str | None = None
    call: ast.Call | None = None


def _mentions_pp(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        name = sub.attr if isinstance(sub, ast.Attribute) else getattr(sub, "id", None)
        if isinstance(name, str) and (
            _PP_NAME_RE.search(name) or name in ("is_last_rank", "is_first_rank")
        ):
            return True
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            if sub.func.id == "get_pp_group":
                return True
    return False


def _not(value: bool | None) -> bool | None:
    return None if value is None else not value


def _message(exc: ast.expr | None) -> tuple[str, str | None]:
    if exc is None:
        return "", None
    call = exc if isinstance(exc, ast.Call) else None
    func = call.func if call else exc
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if call is None or not call.args:
        return name, None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return name, arg.value
    return name, ast.unparse(arg)


class _Walker:
    def __init__(self, index: ModelIndex, cls: ClassKey, func: ast.FunctionDef):
        self.index = index
        self.cls = cls
        self.func = func
        args = func.args.posonlyargs + func.args.args
        self.param = args[1].arg if len(args) > 1 else None

    # -- tests
    def _is_param(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == self.param

    def _is_pp_size(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "world_size":
            return _mentions_pp(node.value)
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        return bool(_PP_SIZE_RE.match(name or ""))

    def evaluate(self, test: ast.expr, scen: _Scenario) -> bool | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return _not(self.evaluate(test.operand, scen))
        if isinstance(test, ast.BoolOp):
            values = [self.evaluate(v, scen) for v in test.values]
            if isinstance(test.op, ast.Or):
                return True if True in values else (False if all(v is False for v in values)
                                                    else None)
            return False if False in values else (True if all(v is True for v in values)
                                                  else None)
        if self._is_param(test):
            return not scen.ids_none
        if isinstance(test, ast.Attribute) and test.attr == "is_last_rank":
            return scen.last_rank if scen.pp else True
        if isinstance(test, ast.Attribute) and test.attr == "is_first_rank":
            return None if scen.pp else True
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if self._is_param(left) and isinstance(right, ast.Constant) and right.value is None:
                if isinstance(op, (ast.Is, ast.Eq)):
                    return scen.ids_none
                if isinstance(op, (ast.IsNot, ast.NotEq)):
                    return not scen.ids_none
            if self._is_pp_size(left) and isinstance(right, ast.Constant) and isinstance(
                right.value, int
            ):
                size, bound = (2 if scen.pp else 1), right.value
                compare = {ast.Gt: size > bound, ast.GtE: size >= bound, ast.Lt: size < bound,
                           ast.LtE: size <= bound, ast.Eq: size == bound,
                           ast.NotEq: size != bound}
                return compare.get(type(op))
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and test.func.id == "hasattr"
            and len(test.args) == 2
            and isinstance(test.args[1], ast.Constant)
            and isinstance(test.args[1].value, str)
        ):
            # The ordinary path: the inner model has the hook (a delegate that cannot be
            # resolved is reported as such where it is called).
            if HOOK_RE.match(test.args[1].value):
                return True
        return None

    def receiver_classes(self, node: ast.expr) -> list[ClassKey] | None:
        if isinstance(node, ast.Name) and node.id == "self":
            return [self.cls]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            return self.index.attribute_classes(self.cls, node.attr)
        return None

    # -- walk
    def run(self, stmts: list[ast.stmt], scen: _Scenario, state: dict) -> _Event | None:
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                value = self.evaluate(stmt.test, scen)
                if value is None and scen.ids_none and self._tests_ids(stmt.test):
                    return _Event("uses")  # e.g. ``if sorted(ids) != ids``: None as a list
                branch = stmt.body if value is True else stmt.orelse
                skipped = stmt.orelse if value is True else stmt.body
                if value is not None and skipped and _mentions_pp(stmt.test) and scen.pp:
                    state["pp_skipped"] = True
                none_branch = (scen.ids_none and value is not None and bool(branch)
                               and self._tests_ids(stmt.test))
                event = self.run(branch, scen, state)
                if event is not None:
                    return event
                if none_branch:
                    return _Event("default")
            elif isinstance(stmt, ast.Assert):
                if self.evaluate(stmt.test, scen) is False:
                    message = stmt.msg
                    text = (message.value if isinstance(message, ast.Constant)
                            and isinstance(message.value, str)
                            else ast.unparse(message) if message is not None else None)
                    return _Event("raise", exc="AssertionError", message=text)
            elif isinstance(stmt, ast.Raise):
                exc, message = _message(stmt.exc)
                return _Event("raise", exc=exc, message=message)
            elif isinstance(stmt, ast.Return):
                return _Event("return")
            elif isinstance(stmt, (ast.Try, ast.With, ast.For, ast.While)):
                event = self.run(stmt.body, scen, state)
                if event is not None:
                    return event
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = stmt.value.func
                if isinstance(func, ast.Attribute) and HOOK_RE.match(func.attr):
                    # With None ids only a call that passes them on decides what None means;
                    # a call with ids computed here is the setter's own work.
                    if not scen.ids_none or self.passes_ids(stmt.value):
                        return _Event("delegate", call=stmt.value)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and scen.ids_none:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(self._is_param(t) for t in targets) and stmt.value is not None:
                    # Rebinding the ids: from themselves (``tuple(ids)``) uses None as a
                    # list; from anything else gives them a default.
                    uses = any(self._is_param(n) for n in ast.walk(stmt.value))
                    return _Event("uses" if uses else "default")
        return None

    def passes_ids(self, call: ast.Call) -> bool:
        return any(self._is_param(a) for a in call.args[:1]) or any(
            self._is_param(k.value) for k in call.keywords
        )

    def _tests_ids(self, test: ast.expr) -> bool:
        return any(self._is_param(n) for n in ast.walk(test))


# --------------------------------------------------------------------------- facts


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
            results.append({**self.setter_facts(target, func.attr),
                            "_id": _setter_id(self.index, target, func.attr)})
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

        # Under PP: the first loud failure on any rank wins; else silent loss on non-last ranks.
        outcomes = []
        for scen in (_PP_NON_LAST, _PP_LAST):
            state: dict = {}
            event = walker.run(func.body, scen, state)
            outcomes.append((event, state))
        pp, pp_raise = "runs", None
        for event, _state in outcomes:
            if event is not None and event.kind == "raise":
                pp, pp_raise = "raises", {"type": event.exc, "message": event.message}
                break
        if pp != "raises":
            event, state = outcomes[0]
            if event is not None and event.kind == "return" or state.get("pp_skipped"):
                pp = "skips_non_last_ranks"
            elif event is not None and event.kind == "delegate":
                found = delegate_of(event)
                if found is None:
                    pp = "unresolved"
                else:
                    pp, pp_raise = _worst_pp(found)
        facts["pp"] = pp
        if pp_raise is not None:
            facts["pp_raise"] = pp_raise

        # With None ids (no PP).
        event = walker.run(func.body, _NONE, {})
        none, none_raise = "unchecked", None
        if event is not None and event.kind == "raise":
            none, none_raise = "rejected", {"type": event.exc, "message": event.message}
        elif event is not None and event.kind == "default":
            none = "default_layers"
        elif event is not None and event.kind == "return":
            none = "ignored"
        elif event is not None and event.kind == "delegate":
            found = delegate_of(event)
            if found is None:
                none = "unresolved"
            else:
                none, none_raise = _common_none(found)
        facts["none"] = none
        if none_raise is not None:
            facts["none_raise"] = none_raise
        if via:
            facts["via"] = sorted(via)
        if unresolved:
            facts["unresolved"] = sorted(unresolved)
        return facts


_PP_RANK = {"raises": 3, "unresolved": 2, "skips_non_last_ranks": 1, "runs": 0}


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
                owners = [found[0]] if found is not None else [
                    target[0] for target in (
                        index.method(c, hook) for c in index.forwarded_classes(key))
                    if target is not None
                ]
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


def build(trees: Mapping[str, Path]) -> dict:
    """The whole data file (see docs/hook-facts.md)."""
    releases = sorted(trees, key=_version_key)
    return merge({release: derive_release(trees[release]) for release in releases})


def merge(per_release: Mapping[str, Mapping[str, Mapping[str, dict]]]) -> dict:
    """``{release: {hook: {setter: facts}}}`` -> the data file's layout, in which each setter
    lists its distinct facts once, with the releases that have them:
    ``{"format", "releases", "hooks": {hook: {setter: [{"releases": [...], **facts}]}}}``."""
    releases = sorted(per_release, key=_version_key)
    hooks: dict[str, dict[str, list[dict]]] = {}
    for release in releases:
        for hook, setters in per_release[release].items():
            for setter, facts in setters.items():
                variants = hooks.setdefault(hook, {}).setdefault(setter, [])
                for variant in variants:
                    if {k: v for k, v in variant.items() if k != "releases"} == facts:
                        variant["releases"].append(release)
                        break
                else:
                    variants.append({"releases": [release], **facts})
    return {"format": FORMAT, "releases": releases, "hooks": hooks}


def dumps(data: dict) -> str:
    """Deterministic text: sorted keys, one level of indent per nesting, and lists of strings
    or objects of plain values kept on one line."""
    return _dump(data, 0) + "\n"


def _flat(value: object) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, (str, int, float, bool)) or v is None for v in value)
    if isinstance(value, dict):
        return all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values())
    return True


def _dump(value: object, depth: int) -> str:
    if _flat(value):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, list):
        items = [inner + _dump(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    assert isinstance(value, dict)
    items = [f"{inner}{json.dumps(k)}: {_dump(value[k], depth + 1)}" for k in sorted(value)]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _cached_trees(releases: Iterable[str]) -> dict[str, Path]:
    sys.path.insert(0, str(PROJECT_ROOT / "tests"))
    from sglang_support.env import sglang_tree

    return {release: sglang_tree(release) for release in releases}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="VERSION=ROOT",
                        help="an unpacked release (the directory holding sglang/)")
    parser.add_argument("--output", type=Path, default=DATA_FILE)
    parser.add_argument("--check", action="store_true",
                        help="compare with the data file instead of writing it")
    args = parser.parse_args(argv)
    trees: dict[str, Path] = {}
    for item in args.tree:
        version, sep, root = item.partition("=")
        if not sep:
            parser.error(f"--tree {item!r}: expected VERSION=ROOT")
        trees[version] = Path(root)
    if not trees:
        trees = _cached_trees(RELEASES)
    try:
        text = dumps(build(trees))
    except HookFactsError as exc:
        print(f"derive_hook_facts: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run scripts/derive_hook_facts.py",
                  file=sys.stderr)
            return 1
        return 0
    _write_atomic(args.output, text)
    print(f"wrote {args.output} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
