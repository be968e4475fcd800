"""The runtime guard and the relaxed server-arg validation as parts of the patch.

* ``runtime guard`` (``runtime_guard.py``): the check after every call of a capture hook
  under ``sglang/srt/model_executor/``, on every release, so that a model that does not
  relay a method's captures is refused by name under PP wherever the runner configures
  the capture.  Not applicable where no model part of the patch applies or the runner
  calls no capture hook; left out (the rest of the patch stands) where a call has a shape
  no check can be put after, or a function whose check reads its new ``pp_size``
  parameter has a call that cannot pass it (or none under the runner package), naming the
  file, function and line.  It builds on a runner file an earlier part changed (the
  sizing part's ``model_runner.py``, where a call passes ``pp_size``).  Its facts are the
  :class:`~codemods.upstream.validation.runtime_guard.GuardResult`.
* ``validation`` (``relax.py``): runs last, accepting what the model parts before it make
  safe, for the architectures the capture-hook family rewrites (``plan.facts(facts.FAMILY)``).
  Where it relaxes the validation and the runtime is guarded it ships the relay test.  Its
  facts are the :class:`~codemods.upstream.validation.relax.ValidationResult`, always set,
  with the shipped relay test in ``tests`` where it is part of the patch.
"""

from __future__ import annotations

from dataclasses import replace

from codemods.catalog.methods import RELAYED, either
from codemods.upstream import facts as part_facts
from codemods.upstream import part
from codemods.upstream.edit.names import GLUE_MODULE
from codemods.upstream.edit.runtime import runtime_change
from codemods.upstream.tree.sglang_tree import SGLangTree
from codemods.upstream.validation.guard_package import guard_changes
from codemods.upstream.validation.relax import (
    MODULE,
    ValidationShapeError,
    validation_changes,
)
from codemods.upstream.validation.runtime_guard import (
    relay_test,
    relay_test_changes,
)

GUARD_NAME = part_facts.GUARD.part


def decide_guard(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    if not any(d.applies for d in plan.decided.values()):
        return part.not_applicable("no model part of this patch applies")
    found = guard_changes(tree, plan.text)
    if found.changes and not any(d.applies and d.changes for d in plan.decided.values()):
        # Models that relay on their own, and no check there yet: leave the runner as is.
        return part.not_applicable("no other part of this patch changes a file", facts=found)
    if found.unguarded:
        first = found.unguarded[0]
        return part.left_out(
            f"cannot guard a runner call of a capture hook: {first.describe()}",
            "a model that does not relay a method's captures still loses them silently "
            "under PP where the runner configures that capture",
            facts=found,
        )
    if not found.sites:
        return part.not_applicable(
            f"{found.package}: no runner call of a capture hook", facts=found
        )
    changes = (
        [*found.changes, runtime_change(tree, plan.text(tree.module_path(GLUE_MODULE)))]
        if found.changes
        else []
    )
    return part.applies(changes, facts=found)


def decide(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    try:
        found = validation_changes(tree, plan.facts(part_facts.FAMILY))
    except ValidationShapeError as err:
        return part.cannot_apply(str(tree.file(tree.module_path(MODULE))), str(err))
    if not found.architectures:
        return part.not_applicable(
            f"no rewritten model file of the capture-hook family has an {either(RELAYED)} hook",
            facts=found,
        )
    if found.change is None:
        reason = found.notes[0] if found.notes else "nothing to relax"
        return part.not_applicable(reason, found.notes, facts=found)
    change = found.change
    if not change.changed:
        return part.applies([], found.notes, facts=found)
    guarded = plan.facts(part_facts.GUARD)
    if guarded is not None and guarded.changes:
        found = replace(found, tests=relay_test(tree))
    relay = relay_test_changes(tree, found.tests)
    return part.applies([*relay, change], found.notes, facts=found)


GUARD = part.Part(GUARD_NAME, decide_guard)
VALIDATION = part.Part(part_facts.VALIDATION.part, decide)
MODULES = (MODULE,)
