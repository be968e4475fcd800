"""Stand-in for ``xgrammar`` (grammar-constrained decoding), which the model path never uses.

Names are created on first access as empty classes; ``StructuralTag`` is a pydantic model
because SGLang's OpenAI protocol module uses it as a field type.
"""

from __future__ import annotations

import pydantic

__version__ = "0.0.0"


class StructuralTag(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


def _make_name(item: str):
    return type(item, (), {"__module__": __name__})


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    value = _make_name(item)
    globals()[item] = value
    return value
