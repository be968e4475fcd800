"""The model files of a tree and their classes, with bases resolved across the files.

The validation part asks which classes relay a capture method (``relax.py``) and why the
others cannot (``refusals.py``); both read the classes from one :class:`ModelClasses`.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from codemods.catalog.derive.index import (
    MODELS_DIR,
    ClassKey,
    HookFactsError,
    _Module,
    _parse_module,
)

#: The package of the model files, as their imports name it.
MODELS_PACKAGE = ".".join(MODELS_DIR)
#: A base outside the model files (``nn.Module``, a class from another package).
_OUTSIDE = "?"


class ModelClasses:
    """The model files of a tree, parsed on demand, with their classes' bases resolved
    through their imports across the model files (``catalog.derive.index``'s parsing)."""

    def __init__(self, models_dir: Path, texts: Mapping[str, str] | None = None) -> None:
        """``texts``: model file -> its text where it is read from there rather than the
        tree (the files as the patch leaves them)."""
        self.models_dir = models_dir
        self.texts = dict(texts or {})
        self._modules: dict[str, _Module | None] = {}

    def module(self, rel: str) -> _Module | None:
        if rel not in self._modules:
            path = self.models_dir / rel
            dotted = f"{MODELS_PACKAGE}.{rel.removesuffix('.py').replace('/', '.')}"
            dotted = dotted.removesuffix(".__init__")
            try:
                text = self.texts.get(rel) or path.read_text(encoding="utf-8-sig")
                parsed: _Module | None = _parse_module(rel, dotted, text, str(path))
            except (OSError, UnicodeDecodeError, HookFactsError):
                parsed = None
            self._modules[rel] = parsed
        return self._modules[rel]

    def entry_files(self) -> list[str]:
        """The model files that name an ``EntryClass``."""
        found = []
        for path in sorted(self.models_dir.rglob("*.py")):
            rel = path.relative_to(self.models_dir).as_posix()
            try:
                text = self.texts.get(rel) or path.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError):
                continue
            if "EntryClass" in text:
                found.append(rel)
        return found

    def _file_of(self, dotted: str) -> str | None:
        """The model file of the module ``dotted`` (None outside the model files)."""
        if not dotted.startswith(MODELS_PACKAGE + "."):
            return None
        rel = dotted[len(MODELS_PACKAGE) + 1 :].replace(".", "/")
        for candidate in (f"{rel}.py", f"{rel}/__init__.py"):
            if (self.models_dir / candidate).is_file():
                return candidate
        return None

    def resolve(self, rel: str, name: str, depth: int = 0) -> ClassKey | None:
        """The class ``name`` means in the model file ``rel`` (defined or imported there)."""
        module = self.module(rel)
        if module is None or depth > 8:
            return None
        if name in module.classes:
            return (rel, name)
        if name in module.imports:
            dotted, original = module.imports[name]
            target = self._file_of(dotted)
            if target is not None:
                return self.resolve(target, original, depth + 1)
        return None

    def _base(self, key: ClassKey, base: ast.expr) -> ClassKey:
        found = None
        if isinstance(base, ast.Name):
            found = self.resolve(key[0], base.id)
        elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
            # ``module.Class``, the module imported from the model package.
            module = self.module(key[0])
            imported = module.imports.get(base.value.id) if module is not None else None
            target = self._file_of(".".join(imported)) if imported is not None else None
            if target is not None:
                found = self.resolve(target, base.attr)
        return found if found is not None else (_OUTSIDE, ast.unparse(base))

    def classdef(self, key: ClassKey) -> ast.ClassDef | None:
        module = self.module(key[0]) if key[0] != _OUTSIDE else None
        return module.classes.get(key[1]) if module is not None else None

    def mro(self, key: ClassKey, depth: int = 0) -> list[ClassKey] | None:
        """The C3 method resolution order of ``key`` (a base outside the model files stands
        for itself alone); None where it cannot be linearised."""
        node = self.classdef(key)
        if node is None or depth > 32:
            return [key]
        bases = [self._base(key, base) for base in node.bases]
        sequences = [self.mro(base, depth + 1) for base in bases]
        if any(sequence is None for sequence in sequences):
            return None
        pending = [list(sequence) for sequence in sequences if sequence] + [bases]
        order = [key]
        while any(pending):
            pending = [sequence for sequence in pending if sequence]
            head = next(
                (
                    sequence[0]
                    for sequence in pending
                    if not any(sequence[0] in other[1:] for other in pending)
                ),
                None,
            )
            if head is None:
                return None
            order.append(head)
            pending = [sequence[1:] if sequence[0] == head else sequence for sequence in pending]
        return order
