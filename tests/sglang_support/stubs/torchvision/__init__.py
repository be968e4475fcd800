"""Stand-in for ``torchvision`` (only imported, never used, by the SGLang text-model path)."""

from __future__ import annotations

from _empty_names import stub_submodules

__version__ = "0.0.0"


class _Placeholder:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args, **kwargs):
        return _Placeholder(f"{self._name}()")

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __mro_entries__(self, bases):
        return (object,)


def _module_getattr(module_name: str):
    def __getattr__(item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{module_name}.{item}")

    return __getattr__


stub_submodules("torchvision", _module_getattr)

__getattr__ = _module_getattr("torchvision")
