"""Whether a module pins pipeline parallelism off: ``pp_size`` is the literal 1 wherever the
module sets it.

A call whose hook loses its captures silently under PP (risk ``pp-silent``) cannot lose them
in a module that runs with one pipeline stage, so that risk is not reported there.  Kept
simple and literal; the module pins PP off when it sets ``pp_size`` at least once and every
such place says 1:

- a keyword argument ``pp_size=1`` (``ServerArgs(..., pp_size=1)``, ``Engine(pp_size=1)``);
- an assignment ``pp_size = 1``, ``args.pp_size = 1``, ``pp_size: int = 1``;
- a dict entry ``"pp_size": 1``;
- a literal list or tuple of command-line words ``[..., "--pp-size", "1", ...]`` or
  ``"--pp-size=1"`` (``1`` as an int too).

Any other value in one of those places, an augmented assignment, or a parameter named
``pp_size`` (whatever its default: the caller chooses) means it is not pinned.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

NAME = "pp_size"
FLAG = "--pp-size"


def _is_one(node: cst.BaseExpression | None) -> bool:
    if isinstance(node, cst.Integer):
        return node.evaluated_value == 1
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value == "1"
    return False


def _names_pp_size(target: cst.BaseExpression) -> bool:
    if isinstance(target, cst.Name):
        return target.value == NAME
    return isinstance(target, cst.Attribute) and target.attr.value == NAME


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _flag_values(node: cst.List | cst.Tuple) -> Iterable[bool | None]:
    """Whether each ``--pp-size`` word of a literal list of words says 1 (None: no value)."""
    words = [element.value for element in node.elements if isinstance(element, cst.Element)]
    for index, word in enumerate(words):
        text = _string(word)
        if text == FLAG:
            following = words[index + 1] if index + 1 < len(words) else None
            yield _is_one(following)
        elif text is not None and text.startswith(FLAG + "="):
            yield text[len(FLAG) + 1 :] == "1"


def pins_pp_size_one(nodes: Iterable[cst.CSTNode]) -> bool:
    """Whether the module whose nodes are ``nodes`` (every node, e.g. discovery's parent map)
    pins ``pp_size`` to the literal 1 (see the module docstring)."""
    seen = False
    for node in nodes:
        says_one: Iterable[bool | None] = ()
        if isinstance(node, cst.Arg) and node.keyword is not None:
            if node.keyword.value == NAME:
                says_one = (_is_one(node.value),)
        elif isinstance(node, cst.Assign):
            if any(_names_pp_size(target.target) for target in node.targets):
                says_one = (_is_one(node.value),)
        elif isinstance(node, cst.AnnAssign):
            if _names_pp_size(node.target):
                says_one = (_is_one(node.value),)
        elif isinstance(node, cst.AugAssign):
            if _names_pp_size(node.target):
                return False
        elif isinstance(node, cst.Param):
            if node.name.value == NAME:
                return False
        elif isinstance(node, cst.DictElement):
            if _string(node.key) == NAME:
                says_one = (_is_one(node.value),)
        elif isinstance(node, cst.List | cst.Tuple):
            says_one = tuple(_flag_values(node))
        for value in says_one:
            if not value:
                return False
            seen = True
    return seen
