"""Stand-in for ``fastapi.responses`` (see ``fastapi/__init__.py``)."""

from __future__ import annotations


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    value = type(item, (), {"__module__": __name__})
    globals()[item] = value
    return value
