"""Parse each source text once per run.

Inside ``with parse_once():`` (one ``generate`` run), :func:`parse_text` parses a given text
once: the capture-hook family and the Kimi-Linear and Kimi-K3 rewriters all read
``kimi_linear.py`` and ``kimi_k3.py``, for example, and share one tree (trees are immutable).
The block also pauses Python's cyclic garbage collector: the trees of a run (about a million
nodes for SGLang's model files) live until the run ends and hold no reference cycles, yet
every full collection would walk all of them again, which made parsing them in a run about
a third slower than parsing them one at a time.
(:func:`~codemods.upstream.edit.splice.module_code` writes a rewrite of such a tree back
from its text.)

Before::

    module = cst.parse_module(source)

After::

    with parse_once():
        module = parse_text(source)
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import libcst as cst

from codemods.upstream.edit.walk import forget_walks

#: text -> tree, while a ``parse_once`` block runs.
_TREES: ContextVar[dict[str, cst.Module] | None] = ContextVar("_TREES", default=None)
#: id(tree) -> (tree, text) for the same trees.
_SOURCES: ContextVar[dict[int, tuple[cst.Module, str]] | None] = ContextVar(
    "_SOURCES", default=None
)


@contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, :func:`parse_text` parses each distinct text once, and the cyclic
    garbage collector is paused (as it was before the block once it ends)."""
    trees, sources = _TREES.set({}), _SOURCES.set({})
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # The trees go before the collector resumes: its first collection then has only
        # what outlives the run to look at, not every node allocated while it was paused.
        _TREES.reset(trees)
        _SOURCES.reset(sources)
        forget_walks()
        if collecting:
            gc.enable()


def parse_text(source: str) -> cst.Module:
    """``cst.parse_module(source)``, shared within a ``parse_once`` block (trees are
    immutable, so sharing is safe)."""
    trees, sources = _TREES.get(), _SOURCES.get()
    if trees is None or sources is None:
        return cst.parse_module(source)
    module = trees.get(source)
    if module is None:
        module = trees[source] = cst.parse_module(source)
        sources[id(module)] = (module, source)
    return module


def known_text(module: cst.Module) -> str | None:
    """The text :func:`parse_text` parsed ``module`` from in this ``parse_once`` block."""
    known = (_SOURCES.get() or {}).get(id(module))
    return known[1] if known is not None and known[0] is module else None


def source_text(module: cst.Module) -> str:
    """``module.code``: the text :func:`parse_text` parsed it from, when known."""
    text = known_text(module)
    return module.code if text is None else text
