"""Source positions of a few chosen nodes, from one plain code generation.

LibCST's ``PositionProvider`` records the range of every node in the module, which costs about
twice a parse of the file; discovery and the codemods need the start of a handful of nodes
(the hook calls and their statements).  ``code_and_positions`` generates the module's code
once and notes where each chosen node starts, with the same meaning as
``PositionProvider``'s ``start`` (line 1-based, column 0-based, syntactic: leading blank lines
and comments of a statement are not part of it).  The code comes back too, so a caller that
needs both pays for one generation.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition

#: Line breaks as LibCST's position provider counts them.
_NEWLINE = re.compile(r"\r\n?|\n")


@dataclass
class _TargetedState(CodegenState):
    targets: Collection[cst.CSTNode] = field(default_factory=frozenset)
    found: dict[cst.CSTNode, CodePosition] = field(default_factory=dict)
    _counted: int = 0
    _line: int = 1
    _column: int = 0

    def _here(self) -> CodePosition:
        text = "".join(self.tokens[self._counted :])
        self._counted = len(self.tokens)
        segments = _NEWLINE.split(text)
        if len(segments) == 1:
            self._column += len(text)
        else:
            self._line += len(segments) - 1
            self._column = len(segments[-1])
        return CodePosition(self._line, self._column)

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        wanted = node in self.targets
        if wanted and start_node is None:
            self.found[node] = self._here()
        yield
        if wanted and start_node is not None and start_node in self.found:
            self.found[node] = self.found[start_node]


def code_and_positions(
    module: cst.Module, nodes: Collection[cst.CSTNode]
) -> tuple[str, dict[cst.CSTNode, CodePosition]]:
    """The module's code, and where each of ``nodes`` starts in it."""
    state = _TargetedState(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
        targets=set(nodes),
    )
    module._codegen(state)
    return "".join(state.tokens), state.found
