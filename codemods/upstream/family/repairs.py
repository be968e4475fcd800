"""Repairs a model needs before its aux captures can work under PP at all.

Two shapes in SGLang keep a model from capturing under PP whatever the relay does:

* the causal-LM hook calls ``self.model.set_<x>_layers_to_capture(ids)`` but the decoder
  stack does not define it (the hook fails even with PP=1).  The stack gets the setter,
  storing the ids where its forward reads them; before::

      class Qwen3LLMModel(Qwen3Model):
          ...
          def forward(self, ...):

  after::

      class Qwen3LLMModel(Qwen3Model):
          ...
          def set_dflash_layers_to_capture(self, layers_to_capture: List[int]):
              self.layers_to_capture = layers_to_capture

          def forward(self, ...):

* the causal-LM ``forward`` unpacks the stack output on every rank, which fails on
  non-last ranks (see :class:`StageOutputFix`).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from codemods.upstream.edit.pyformat import parse_statements
from codemods.upstream.family.forward import FamilyRewriteError
from codemods.upstream.family.survey import forward_stack_unpacks
from codemods.upstream.family.syntax import IDS_ATTR


@dataclass(frozen=True)
class StackSetter:
    """A capture-id setter to add to a decoder-stack class: the causal-LM hook calls
    ``self.model.<method>(ids)`` but the class does not define it."""

    class_name: str
    method: str
    annotation: str | None = None

    def source(self) -> str:
        annotation = f": {self.annotation}" if self.annotation else ""
        pad = " " * 4
        return (
            f"{pad}def {self.method}(self, {IDS_ATTR}{annotation}):\n"
            f"{pad * 2}self.{IDS_ATTR} = {IDS_ATTR}\n"
        )


#: Local holding a stack's output before a causal-LM forward unpacks it.
STAGE_OUTPUT = "stage_output"


@dataclass(frozen=True)
class StageOutputFix:
    """A causal-LM ``forward`` that unpacks the decoder-stack output on every rank,
    which fails on non-last PP ranks (the stack returns ``PPProxyTensors``).

    Before::

        hidden_states, hidden_states_before_norm = self.model(...)

    after (a non-last stage hands its ``PPProxyTensors`` on, as the forward's final
    ``else: return hidden_states`` meant to)::

        stage_output = self.model(...)
        if not self.pp_group.is_last_rank:
            return stage_output
        hidden_states, hidden_states_before_norm = stage_output
    """

    class_name: str
    receiver: str
    pp_group: str
    #: The first such statement, shortened, for reports.
    unpacked: str


def add_stack_setters(cls: cst.ClassDef, additions: list[StackSetter]) -> cst.ClassDef:
    """``cls`` with the setters added right before its ``forward`` (the method that
    reads the ids), each after one blank line."""
    body = list(cls.body.body)
    position = next(
        (
            k
            for k, statement in enumerate(body)
            if isinstance(statement, cst.FunctionDef) and statement.name.value == "forward"
        ),
        len(body),
    )
    blank = cst.EmptyLine(indent=False)
    for addition in additions:
        (method,) = parse_statements(addition.source(), " " * 4)
        body.insert(position, method.with_changes(leading_lines=[blank]))
        position += 1
    if position < len(body):
        following = body[position]
        # a statement of the class block: a simple line or a compound statement
        assert isinstance(following, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        comments = [line for line in following.leading_lines if line.comment is not None]
        body[position] = following.with_changes(leading_lines=[blank, *comments])
    return cls.with_changes(body=cls.body.with_changes(body=body))


def fix_stage_unpacks(fn: cst.FunctionDef, fix: StageOutputFix) -> cst.FunctionDef:
    """See :class:`StageOutputFix`."""
    targets = {id(statement) for statement in forward_stack_unpacks(fn, fix.receiver)}
    if not targets:
        raise FamilyRewriteError(f"{fix.class_name}.forward unpacks no stack output")
    check = cst.parse_statement(f"if not {fix.pp_group}.is_last_rank:\n    return {STAGE_OUTPUT}\n")

    class _Split(cst.CSTTransformer):
        def leave_IndentedBlock(self, original, updated):
            body = []
            for before, after in zip(original.body, updated.body, strict=False):
                if id(before) not in targets:
                    body.append(after)
                    continue
                assign = after.body[0]
                keep = cst.SimpleStatementLine(
                    body=[
                        cst.Assign(
                            targets=[cst.AssignTarget(cst.Name(STAGE_OUTPUT))],
                            value=assign.value,
                        )
                    ],
                    leading_lines=after.leading_lines,
                )
                unpack = after.with_changes(
                    body=[assign.with_changes(value=cst.Name(STAGE_OUTPUT))],
                    leading_lines=[],
                )
                body += [keep, check, unpack]
            return updated.with_changes(body=body)

    split = fn.visit(_Split())
    assert isinstance(split, cst.FunctionDef)  # _Split rewrites blocks inside it only
    return split
