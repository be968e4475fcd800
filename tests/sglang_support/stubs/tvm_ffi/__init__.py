"""Stand-in for ``tvm_ffi``, which SGLang imports at module level on paths the CPU model
tests never run.  Names are created on first access as empty classes."""

from __future__ import annotations

__version__ = "0.0.0"


def _make_name(item: str):
    return type(item, (), {"__module__": __name__})


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    value = _make_name(item)
    globals()[item] = value
    return value
