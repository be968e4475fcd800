"""Stand-in for Hugging Face ``datasets``, which ``sglang.test.test_utils`` imports
(through ``sglang.benchmark.datasets``) at module level; no data set is ever loaded.
Names are created on first access as empty classes or placeholders."""

from __future__ import annotations

from _empty_names import empty_names

__version__ = "0.0.0"
__getattr__ = empty_names(__name__)
