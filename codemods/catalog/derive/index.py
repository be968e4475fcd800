"""The model modules of one SGLang tree (``sglang/srt/models/**/*.py``), parsed with ``ast``:
their classes, imports, ``EntryClass`` and module-level names, with class lookup across the
imports, method resolution, and the classes whose instances ``self.<attr>`` can hold."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODELS_DIR = ("sglang", "srt", "models")

ClassKey = tuple[str, str]  # (module path relative to the models dir, class name)


#: ``ModelIndex._instances`` / ``_classes``: ``(self, key, rel, expr, func, depth)`` -> the
#: classes ``expr`` leads to.
_Follow = Callable[[Any, ClassKey, str, ast.expr, "ast.FunctionDef | None", int], list[ClassKey]]
#: How deep those follow an expression through names, calls and tables.
_MAX_DEPTH = 12


def _both_branches(follow: _Follow) -> _Follow:
    """``follow`` giving up past :data:`_MAX_DEPTH` and taking both branches of a
    conditional expression (``A if c else B`` leads where ``A`` and ``B`` lead)."""

    @functools.wraps(follow)
    def bounded(self, key, rel, expr, func, depth):
        if depth > _MAX_DEPTH:
            return []
        if isinstance(expr, ast.IfExp):
            return bounded(self, key, rel, expr.body, func, depth + 1) + bounded(
                self, key, rel, expr.orelse, func, depth + 1
            )
        return follow(self, key, rel, expr, func, depth)

    return bounded


class HookFactsError(RuntimeError):
    """A model file or release tree that cannot be analysed (names the file and the reason)."""


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

    @_both_branches
    def _instances(
        self, key: ClassKey, rel: str, expr: ast.expr, func: ast.FunctionDef | None, depth: int
    ) -> list[ClassKey]:
        """Classes whose instance ``expr`` (in ``func`` of module ``rel``) can be."""
        if isinstance(expr, ast.Call):
            return self._classes(key, rel, expr.func, func, depth + 1)
        if isinstance(expr, ast.Name) and func is not None:
            return [
                c
                for value in _local_values(func, expr.id)
                for c in self._instances(key, rel, value, func, depth + 1)
            ]
        return []

    @_both_branches
    def _classes(
        self, key: ClassKey, rel: str, expr: ast.expr, func: ast.FunctionDef | None, depth: int
    ) -> list[ClassKey]:
        """Classes whose instance calling ``expr`` gives."""
        if isinstance(expr, ast.Name):
            resolved = self.resolve(rel, expr.id)
            if resolved is not None:
                return [resolved]
            if func is None:
                return []
            return [
                c
                for value in _local_values(func, expr.id)
                for c in self._classes(key, rel, value, func, depth + 1)
            ]
        # A class picked from a module-level table: TABLE.get(k) or TABLE[k].
        table = None
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr == "get"
            and isinstance(expr.func.value, ast.Name)
        ):
            table = expr.func.value.id
        elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
            table = expr.value.id
        if table is not None:
            value = self.modules[rel].globals.get(table) if rel in self.modules else None
            if isinstance(value, ast.Dict):
                return [
                    c
                    for item in value.values
                    for c in self._classes(key, rel, item, None, depth + 1)
                ]
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
            return [
                c
                for node in ast.walk(method)
                if isinstance(node, ast.Return) and node.value is not None
                for c in self._instances(key, owner[0], node.value, method, depth + 1)
            ]
        return []


def _assignments(cls: ast.ClassDef) -> list[tuple[ast.FunctionDef, ast.Assign]]:
    return [
        (method, node)
        for method in cls.body
        if isinstance(method, ast.FunctionDef)
        for node in ast.walk(method)
        if isinstance(node, ast.Assign)
    ]


def _local_values(func: ast.FunctionDef, name: str) -> list[ast.expr]:
    return [
        node.value
        for node in ast.walk(func)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
