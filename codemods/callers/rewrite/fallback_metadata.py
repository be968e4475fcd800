"""What the fallback codemod (:mod:`codemods.callers.rewrite.fallback`) is, for people and tools: id,
summary, description, review guidance, references and the ``--fallback-policy`` option.

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
    id="auxcap:python/fallback-pp-capture",
    action=Action.FALLBACK.value,
    summary="Handle the NotImplementedError capture hooks raise under pipeline parallelism",
    description=(
        "Models that gather aux hidden states on the last pipeline stage only (Kimi-Linear's "
        "set_dspark_layers_to_capture, ...) raise NotImplementedError when pipeline "
        "parallelism is on (PP > 1). The hook call is wrapped in try/except "
        "NotImplementedError: with policy warn the module's logger (added when missing) logs "
        "a warning naming the hook and the run continues without aux hidden capture; with "
        "policy raise the error is re-raised with a hint (run with --pp-size 1, or apply the "
        "upstream patch from auxcap upstream-patch). Calls already inside a try that handles "
        "NotImplementedError are left alone."
    ),
    review_guidance=(
        "With policy warn, a PP deployment keeps serving without aux hidden capture, so "
        "anything that consumes the captured states (speculative decoding drafts, "
        "distillation features) must tolerate their absence; if it cannot, use policy raise. "
        "Check that a module-level logger added by the rewrite fits the module's logging."
    ),
    references=(PP_ERROR_REFERENCE, NONE_ERROR_REFERENCE),
    policy=PolicyOption(
        flag="--fallback-policy",
        help="Under pipeline parallelism: warn and continue, or re-raise with a hint.",
        choices=(
            PolicyChoice(
                "warn",
                "a NotImplementedError from the hook is logged as a warning and the run "
                "continues without aux capture",
                "{hook} is wrapped in try/except NotImplementedError: a warning is logged and "
                "the run continues without aux hidden capture",
            ),
            PolicyChoice(
                "raise",
                "a NotImplementedError from the hook is re-raised with a hint",
                "{hook} is wrapped in try/except NotImplementedError: the error is re-raised "
                "with a hint to run with PP=1 or apply the upstream patch",
            ),
        ),
        default="warn",
    ),
)
