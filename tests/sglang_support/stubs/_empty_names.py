"""Shared by stand-in modules whose names SGLang only imports, never uses on the CPU paths
the tests run: every public name is created on first access as an empty class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def empty_names(module_name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that creates (and caches) an empty class per name."""
    import sys

    def __getattr__(item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        value = type(item, (), {"__module__": module_name})
        setattr(sys.modules[module_name], item, value)
        return value

    return __getattr__
