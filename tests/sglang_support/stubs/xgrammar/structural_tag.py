"""Stand-in for ``xgrammar.structural_tag``: format classes as permissive pydantic models."""

from __future__ import annotations

import pydantic


class Format(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


def __getattr__(item: str):
    if item.startswith("__"):
        raise AttributeError(item)
    value = type(item, (Format,), {"__module__": __name__})
    globals()[item] = value
    return value
