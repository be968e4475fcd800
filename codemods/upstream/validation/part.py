"""The relaxed server-arg validation as a part of the patch (``relax.py``).

It runs last: it accepts what the model parts before it make safe, for the architectures
the capture-hook family rewrites (``plan.facts("family")``).  Its facts are the
:class:`~codemods.upstream.validation.relax.ValidationResult`, always set.
"""

from __future__ import annotations

from codemods.upstream import part
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation.relax import (
    MODULE,
    ValidationShapeError,
    validation_changes,
)


def decide(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    try:
        found = validation_changes(tree, plan.facts("family"))
    except ValidationShapeError as err:
        return part.cannot_apply(str(tree.file(tree.module_path(MODULE))), str(err))
    if not found.architectures:
        return part.not_applicable(
            "no rewritten model file of the capture-hook family has an EAGLE3, DFLASH or DSPARK "
            "hook",
            facts=found,
        )
    if found.change is None:
        reason = found.notes[0] if found.notes else "nothing to relax"
        return part.not_applicable(reason, found.notes, facts=found)
    changes = [found.change] if found.change.changed else []
    return part.applies(changes, found.notes, facts=found)


VALIDATION = part.Part("validation", decide)
MODULES = (MODULE,)
