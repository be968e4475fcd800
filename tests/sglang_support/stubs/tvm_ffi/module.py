"""Stand-in for ``tvm_ffi.module`` (see ``tvm_ffi/__init__.py``)."""

from __future__ import annotations

from _empty_names import empty_names

__getattr__ = empty_names(__name__)
