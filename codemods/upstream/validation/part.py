"""The relaxed server-arg validation as a part of the patch (``relax.py``).

It runs last: it accepts what the model parts before it make safe, for the architectures
the capture-hook family rewrites (``plan.facts("family")``).  Where it relaxes the
validation it also guards ``configure_aux_hidden_state_capture`` (``runtime_guard.py``:
the runtime refusal of a model that does not relay) and ships the relay test.  Its facts
are the :class:`~codemods.upstream.validation.relax.ValidationResult`, always set, with
the shipped relay test in ``tests`` where it is part of the patch.
"""

from __future__ import annotations

from dataclasses import replace

from codemods.upstream import part
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation.relax import (
    MODULE,
    ValidationShapeError,
    validation_changes,
)
from codemods.upstream.validation.runtime_guard import GuardShapeError, guard_changes, relay_test


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
    change = found.change
    if not change.changed:
        return part.applies([], found.notes, facts=found)
    try:
        guarded = guard_changes(tree)
    except GuardShapeError as err:
        return part.cannot_apply(str(err).split(": ", 1)[0], str(err))
    if guarded:
        found = replace(found, tests=relay_test())
    return part.applies([*guarded, change], found.notes, facts=found)


VALIDATION = part.Part("validation", decide)
MODULES = (MODULE,)
