"""What the guard codemod (:mod:`codemods.callers.rewrite.guard`) is, for people and tools: id, summary,
description, review guidance, references and the ``--guard-policy`` option.

Kept apart from the codemod itself so that the command line, the reports and the PR
description can read it without loading LibCST.
"""

from __future__ import annotations

from codemods.callers.records import Action
from codemods.callers.rewrite.metadata import (
    NONE_ERROR_REFERENCE,
    PP_ERROR_REFERENCE,
    CodemodMetadata,
    PolicyChoice,
    PolicyOption,
)

METADATA = CodemodMetadata(
    id="auxcap:python/guard-capture-ids",
    action=Action.GUARD.value,
    summary="Guard capture-hook calls whose layer ids may be None",
    description=(
        "SGLang's DSPARK, DFLASH and MSD capture hooks (set_dspark_layers_to_capture, ...) "
        "reject None and raise ValueError when a caller forwards an unset option such as "
        "args.capture_layers. The call is put behind a check of the ids: with policy skip the "
        "hook is called only when layer ids are set, with policy raise the caller fails early "
        "with a ValueError naming the unset value. The ids are passed as list(...). Literal "
        "ids, calls already behind a check of the ids, and EAGLE3 (which accepts None) are "
        "left alone."
    ),
    review_guidance=(
        "With policy skip, a run without layer ids now silently runs without aux hidden "
        "capture; check that this is wanted where the ids come from, or use policy raise. "
        "Call sites reported for review (a literal None, a call used inside an expression) "
        "were not rewritten and need a person."
    ),
    references=(NONE_ERROR_REFERENCE, PP_ERROR_REFERENCE),
    policy=PolicyOption(
        flag="--guard-policy",
        help="When layer ids are unset: skip the call, or raise ValueError.",
        choices=(
            PolicyChoice(
                "skip",
                "when the layer ids are unset, the hook is not called",
                "{hook} is now called only when {ids} is set, with the ids passed as a list",
            ),
            PolicyChoice(
                "raise",
                "when the layer ids are unset, a clear ValueError is raised at the call site",
                "a ValueError naming {ids} is raised before {hook} when the ids are unset",
            ),
        ),
        default="skip",
    ),
)
