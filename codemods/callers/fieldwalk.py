"""A walk over a LibCST tree that reads its nodes' fields instead of visiting them.

before: ``module.visit(visitor)``: LibCST constructs and validates a copy of every node it
        passes (about ten times the cost of reading the fields), layout nodes included.
after:  ``visitor.walk(module)``: the same ``visit_<Node>``/``leave_<Node>`` methods are called
        in the same order for every node that is not pure layout (whitespace, comments,
        brackets, separators: over half of a module's nodes), and nothing is rebuilt;
        ``parents``, when a walker keeps one, maps each node to its parent.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import libcst as cst

#: Nodes that only carry layout (whitespace, comments, brackets, separators): walkers
#: skip them, which is over half of a module's nodes.
_LAYOUT_NODES = frozenset(
    {
        cst.SimpleWhitespace,
        cst.ParenthesizedWhitespace,
        cst.Newline,
        cst.TrailingWhitespace,
        cst.EmptyLine,
        cst.Comment,
        cst.Comma,
        cst.Dot,
        cst.Colon,
        cst.Semicolon,
        cst.AssignEqual,
        cst.LeftParen,
        cst.RightParen,
        cst.LeftSquareBracket,
        cst.RightSquareBracket,
        cst.LeftCurlyBrace,
        cst.RightCurlyBrace,
    }
)


#: Fields that only ever hold layout.
_LAYOUT_FIELDS = frozenset(
    {"lpar", "rpar", "leading_lines", "trailing_whitespace", "header", "footer", "comma", "dot"}
)


@functools.cache
def _dispatch(walker: type, kind: type) -> tuple[Any, Any, tuple[str, ...]]:
    """The visit and leave functions of ``walker`` for nodes of ``kind``, and the fields of
    ``kind`` that can hold child nodes, in declaration order."""
    fields = tuple(
        field.name
        for field in dataclasses.fields(kind)
        if not field.name.startswith("whitespace") and field.name not in _LAYOUT_FIELDS
    )
    name = kind.__name__
    return getattr(walker, f"visit_{name}", None), getattr(walker, f"leave_{name}", None), fields


class FieldWalker:
    """Mixed into a ``cst.CSTVisitor``: :meth:`walk` instead of ``node.visit(self)``."""

    #: Each walked node's parent, when the walker keeps them (None: it does not).
    parents: dict[cst.CSTNode, cst.CSTNode] | None = None

    def walk(self, node: cst.CSTNode, parent: cst.CSTNode | None = None) -> None:
        """Visit ``node`` and its subtree like ``node.visit(self)``, without rebuilding any
        node and skipping layout nodes; a ``visit_`` method returning False skips the
        subtree, as in LibCST."""
        kind = type(node)
        if kind in _LAYOUT_NODES:
            return
        if parent is not None and self.parents is not None:
            self.parents[node] = parent
        walker: type = type(self)
        visit, leave, fields = _dispatch(walker, kind)
        if visit is None or visit(self, node) is not False:
            for name in fields:
                value = getattr(node, name)
                if isinstance(value, cst.CSTNode):
                    self.walk(value, node)
                elif isinstance(value, (list, tuple)):
                    for item in value:
                        if isinstance(item, cst.CSTNode):
                            self.walk(item, node)
        if leave is not None:
            leave(self, node)
