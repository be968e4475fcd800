"""Stand-in for ``triton`` so SGLang model modules import on a CPU-only machine.

Every attribute is a permissive placeholder (except ``triton.language.constexpr``, which
keeps its value as triton's does): decorators (``jit``, ``autotune``,
``heuristics``) hand the decorated function back unchanged, anything else is a placeholder
that can be called, indexed or read further.  Submodules (``triton.language``,
``triton.language.extra.libdevice``, ...) are created on first import.  No kernel ever runs.
"""

from __future__ import annotations

import importlib
import sys
import types

from _empty_names import stub_submodules

__version__ = "3.5.0"


class _Placeholder:
    """Callable, indexable stand-in; used as a decorator it returns the function unchanged."""

    def __init__(self, name: str = "triton") -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Placeholder(f"{self._name}()")

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __getitem__(self, item):
        return _Placeholder(f"{self._name}[]")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self) -> str:
        return f"<triton stand-in {self._name}>"


def _module_getattr(module_name: str):
    """Module ``__getattr__``: CamelCase names become real (empty) classes, so that
    ``isinstance`` checks against them work; other names become placeholders."""

    def __getattr__(item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        module = sys.modules.get(module_name)
        if item[:1].isupper():
            value = type(item, (), {"__module__": module_name, "__init__": _accept_any})
        else:
            value = _Placeholder(f"{module_name}.{item}")
        if module is not None:
            setattr(module, item, value)
        return value

    return __getattr__


def _accept_any(self, *args, **kwargs) -> None:
    self.args = args
    self.kwargs = kwargs


def _exec_module(module) -> None:
    if module.__name__ == "triton.runtime":
        module.driver = _Driver()
    if module.__name__ == "triton.language":
        module.constexpr = _Constexpr


class _Constexpr:
    """``triton.language.constexpr``: holds a compile-time value in ``.value``, which
    modules read at import (e.g. 0.5.21's ``fp4_indexer.py`` adds two of them)."""

    def __init__(self, value=None) -> None:
        self.value = value.value if isinstance(value, _Constexpr) else value

    def __repr__(self) -> str:
        return f"constexpr[{self.value!r}]"


class _ActiveDriver(_Placeholder):
    """``triton.runtime.driver.active``: reports the CPU as the current target, so
    modules that pick a torch device library from the triton backend at import
    (``getattr(torch, backend)``) get ``torch.cpu``."""

    def get_current_target(self):
        return types.SimpleNamespace(backend="cpu", arch=0, warp_size=32)


class _Driver:
    def __init__(self) -> None:
        self.active = _ActiveDriver("triton.runtime.driver.active")


stub_submodules("triton", _module_getattr, _exec_module)

__getattr__ = _module_getattr("triton")
runtime = importlib.import_module("triton.runtime")
