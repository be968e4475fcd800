"""Stand-in for ``tvm_ffi``, which SGLang imports at module level on paths the CPU model
tests never run.  Names are created on first access as empty classes."""

from __future__ import annotations

from _empty_names import empty_names

__version__ = "0.0.0"
__getattr__ = empty_names(__name__)
