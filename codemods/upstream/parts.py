"""The parts of the upstream patch, in the order the generator asks them.

The order is the patch's: a part's changes follow those of the parts before it (a path
already changed keeps its first change: the helpers module every model part adds), and a
part reads what the parts before it decided (``Plan.facts``): the sizing, packer and tests
parts follow the family's plan, the runtime guard comes once every model part has
answered, the server-arg validation accepts what every model part makes safe, so it
comes last.

This is the only module outside a part that imports one.  A Kimi-style model (one file,
its own rewriter) is one module exposing a ``Part``, one line here, and its fixtures.
"""

from __future__ import annotations

from codemods.upstream.family.part import FAMILY, SHIPPED_TESTS
from codemods.upstream.kimi import part as kimi
from codemods.upstream.part import Part
from codemods.upstream.sizing import part as sizing
from codemods.upstream.validation import part as validation

PARTS: tuple[Part, ...] = (
    kimi.LINEAR,
    kimi.K3,
    FAMILY,
    sizing.PACKER,
    sizing.SIZING,
    SHIPPED_TESTS,
    validation.GUARD,
    validation.VALIDATION,
)

#: Modules outside ``srt/models/`` and the model files of their own the parts rewrite
#: (``auxcap sglang`` watches them for changes made by others).
MODULES: tuple[str, ...] = (*kimi.MODULES, *validation.MODULES, *sizing.MODULES)


def owned_models() -> frozenset[str]:
    """Model file stems a part of their own rewrites (the family leaves them out)."""
    return frozenset(stem for part in PARTS for stem in part.models)
