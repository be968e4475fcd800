"""A small caller codemod that lives outside the package: it puts a comment above each hook
call whose captures are lost without an error under pipeline parallelism (EAGLE3, DFLASH, and
DSPARK on some models).  The registry tests register it (``test_registry_extension.py``) to
show that a codemod is one module, one registry entry and one fixture folder.

Policy ``note`` writes ``# NOTE: ...``, policy ``todo`` writes ``# TODO: ...``.
"""

from __future__ import annotations

import libcst as cst

from codemods.callers.records import Risk, SiteFacts, Verdict
from codemods.callers.rewrite.callsite_codemod import CallSiteCodemod
from codemods.callers.rewrite.metadata import (
    SGLANG_KIMI_LINEAR,
    CodemodMetadata,
    PolicyChoice,
    PolicyOption,
    Reference,
)
from codemods.callers.rewrite.snippets import suite_as_line

TEXT = "captures are lost on non-last PP ranks (auxcap upstream-patch)"

METADATA = CodemodMetadata(
    id="auxcap:python/note-pp-silent",
    action="pp-note",
    summary="Note hook calls whose captures are lost silently under pipeline parallelism",
    description=(
        "Some models' capture hooks return early on non-last pipeline ranks. A comment above "
        "the call says so, and points at the upstream patch."
    ),
    review_guidance="Check whether this deployment runs with pipeline parallelism.",
    references=(
        Reference(SGLANG_KIMI_LINEAR, "a model whose aux hidden states live on the last PP stage"),
    ),
    policy=PolicyOption(
        flag="--pp-note-policy",
        help="How the comment is written: NOTE or TODO.",
        choices=(
            PolicyChoice("note", "a NOTE comment is added", "a NOTE above {hook}"),
            PolicyChoice("todo", "a TODO comment is added", "a TODO above {hook}"),
        ),
        default="note",
    ),
    addresses=("pp-silent",),
    why="captures of {ids} are lost silently on non-last PP ranks: noted",
)


def applies(facts: SiteFacts) -> Verdict:
    """Every call that may lose its captures silently and has a line of its own; one that
    has not is left for review."""
    if Risk.PP_SILENT not in facts.site.risks:
        return Verdict()
    if not facts.movable:
        return Verdict(review=f"{facts.not_own}; note it by hand")
    return Verdict(applies=True)


class PPSilentNoteTransformer(CallSiteCodemod):
    ACTION = METADATA.action
    #: Gives its policies, their label, the default and the ``pp_note_policy=`` keyword.
    METADATA = METADATA

    def _noted(self, original: cst.CSTNode, line: cst.SimpleStatementLine):
        tag = "NOTE" if self.policy == "note" else "TODO"
        comment = cst.EmptyLine(comment=cst.Comment(f"# {tag}: {TEXT}"))
        noted = line.with_changes(leading_lines=[*line.leading_lines, comment])
        if original in self._followed:
            self.moved[original] = noted
        return noted

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if original_node not in self._statements:
            return updated_node
        return self._noted(original_node, updated_node)

    def leave_SimpleStatementSuite(self, original_node, updated_node):
        if original_node not in self._statements:
            return updated_node
        return cst.IndentedBlock(body=[self._noted(original_node, suite_as_line(updated_node))])
