"""Shared by stand-in modules whose names SGLang only imports, never uses on the CPU paths
the tests run: every public name is created on first access as an empty class
(``empty_names``); the submodules of a stand-in package are created on first import
(``stub_submodules``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def empty_names(module_name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that creates (and caches) an empty class per name."""

    def __getattr__(item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        value = type(item, (), {"__module__": module_name})
        setattr(sys.modules[module_name], item, value)
        return value

    return __getattr__


def stub_submodules(
    package: str,
    module_getattr: Callable[[str], Callable[[str], Any]],
    exec_module: Callable[[Any], None] | None = None,
) -> None:
    """Create every ``package.<name>`` on first import as an empty package whose names
    come from ``module_getattr(<its name>)``; ``exec_module(module)`` then adds what a
    submodule must hold.  Installed once per package."""
    import importlib.abc
    import importlib.machinery
    import types

    class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        stub_package = package

        def find_spec(self, fullname, path=None, target=None):
            if fullname.startswith(f"{package}."):
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            module = types.ModuleType(spec.name)
            module.__path__ = []
            module.__getattr__ = module_getattr(spec.name)
            return module

        def exec_module(self, module):
            if exec_module is not None:
                exec_module(module)

    if not any(getattr(finder, "stub_package", None) == package for finder in sys.meta_path):
        sys.meta_path.insert(0, StubFinder())
