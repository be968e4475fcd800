"""Stand-in for ``fastapi.responses`` (see ``fastapi/__init__.py``)."""

from __future__ import annotations

from _empty_names import empty_names

__getattr__ = empty_names(__name__)
