"""Which server configurations reach the patched capture code: the PP refusals left.

SGLang refuses speculative decoding with pipeline parallelism in its server-argument
checks, and the patch relaxes only some of them (``validation/relax.py``, 0.5.21+).  This module
reads the checks as they are *after* the patch (the patch's new text where it changes the
file, the tree's text elsewhere) in the files that hold them across releases
(:data:`FILES`: ``server_args.py``, ``arg_groups/validation_hook.py``,
``arg_groups/speculative_hook.py``), and lists every refusal under a ``pp_size`` condition:

* an ``assert`` requiring ``speculative_algorithm is None`` (every algorithm refused; the
  assert of 0.5.18-0.5.20), noting when it sits in the ``else`` of an ``is_npu`` test;
* a ``raise`` in a ``_handle_<algorithm>`` function of the speculative hook, for the
  algorithms that read captures (:data:`CAPTURE_ALGORITHMS`; that algorithm refused, e.g. ``_handle_dflash``: ``if cfg.pp_size != 1: raise ValueError(...)``),
  ``conditional`` when a further test guards it.

The PR description says from these which configurations reach the change, and the
validation change (``validation/relax.py``) relaxes an algorithm only where no refusal of it is
left (:func:`tree_refusals` on the tree, :func:`refusal_of`).

A refused algorithm's capture hook can still be reached by another one:
:func:`dspark_dflash_fallback` finds where the runner configures a DSPARK target's capture
through ``set_dflash_layers_to_capture`` when the model has no ``set_dspark_layers_to_capture``
(``configure_aux_hidden_state_capture``: ``if is_dspark and hasattr(model,
"set_dspark_layers_to_capture"): ... elif hasattr(model, "set_dflash_layers_to_capture"):
model.set_dflash_layers_to_capture(...)``), so the DFLASH hooks are reached wherever DSPARK
passes with PP.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from codemods.catalog.methods import FALLBACK, FALLBACK_TARGET, RELAYED
from codemods.upstream.tree.sglang_tree import SGLangTree

FILES = (
    "srt/server_args.py",
    "srt/arg_groups/validation_hook.py",
    "srt/arg_groups/speculative_hook.py",
)
EVERY = "every speculative algorithm"
#: The algorithms whose drafters read captured aux hidden states.
CAPTURE_ALGORITHMS = RELAYED


@dataclass(frozen=True)
class Refusal:
    path: str  # patch path of the file
    line: int
    function: str
    condition: str  # the ``pp_size`` test, as written
    algorithm: str  # EVERY, or the algorithm of ``_handle_<algorithm>`` in upper case
    message: str  # the refusal's message (first string of it)
    except_npu: bool = False  # in the ``else`` of an ``is_npu`` test
    conditional: bool = False  # guarded by a further test inside the ``pp_size`` one


def _message(node: ast.AST | None) -> str:
    for sub in ast.walk(node) if node is not None else ():
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            return sub.value
    return ""


def _pp_test(test: ast.expr) -> bool:
    return "pp_size" in ast.unparse(test) and "1" in ast.unparse(test)


def _scan(body, path, function, condition, npu_else, nested, out) -> None:
    for stmt in body:
        if isinstance(stmt, ast.If):
            npu = "is_npu" in ast.unparse(stmt.test)
            _scan(stmt.body, path, function, condition, npu_else, True, out)
            _scan(stmt.orelse, path, function, condition, npu_else or npu, True, out)
        elif isinstance(stmt, ast.Assert) and "speculative_algorithm is None" in ast.unparse(
            stmt.test
        ):
            where = (path, stmt.lineno, function, condition)
            out.append(Refusal(*where, EVERY, _message(stmt.msg), npu_else, False))
        elif (
            isinstance(stmt, ast.Raise)
            and path.endswith("speculative_hook.py")
            and function.removeprefix("_handle_").upper() in CAPTURE_ALGORITHMS
        ):
            algorithm = function.removeprefix("_handle_").upper()
            where = (path, stmt.lineno, function, condition)
            out.append(Refusal(*where, algorithm, _message(stmt.exc), npu_else, nested))


def refusals_in(source: str, path: str) -> list[Refusal]:
    """The PP refusals of speculative decoding in one file's text."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return []
    out: list[Refusal] = []
    for func in ast.walk(module):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.If) and _pp_test(node.test):
                _scan(node.body, path, func.name, ast.unparse(node.test), False, False, out)
    return sorted(set(out), key=lambda r: (r.path, r.line))


def tree_refusals(tree: SGLangTree, new: dict[str, str] | None = None) -> list[Refusal]:
    """The refusals in :data:`FILES` of ``tree``, in that order; ``new`` maps a patch path
    to the text that replaces the tree's."""
    new = new or {}
    out: list[Refusal] = []
    for file in FILES:
        path = f"{tree.package}/{file}"
        text = new[path] if path in new else tree.read_text(path)
        if text:
            out += refusals_in(text, path)
    return out


def refusal_of(found: list[Refusal], algorithm: str) -> Refusal | None:
    """The first refusal in ``found`` that refuses ``algorithm`` with PP outright (its own,
    not guarded by a further test, or the refusal of every algorithm); None when the
    server lets ``algorithm`` through with PP."""
    return next(
        (
            r
            for r in found
            if r.algorithm == EVERY or (r.algorithm == algorithm and not r.conditional)
        ),
        None,
    )


def refuses_every_algorithm(found: list[Refusal]) -> Refusal | None:
    """The refusal of every speculative algorithm with PP, if one is left."""
    return next((r for r in found if r.algorithm == EVERY), None)


#: Where the runner configures the capture (its files are searched for the fallback).
RUNNER_DIR = "srt/model_executor"
#: The hook a target's own capture goes through, the hook the runner falls back to when the
#: model lacks it, and the runner's flag of such a target (``is_dspark``).
DSPARK_HOOK = FALLBACK.hook
DFLASH_HOOK = FALLBACK_TARGET.hook
TARGET_FLAG = f"is_{FALLBACK.family}"


@dataclass(frozen=True)
class Fallback:
    """A call of the DFLASH hook that a DSPARK target reaches."""

    path: str  # patch path of the file
    line: int  # the ``set_dflash_layers_to_capture`` call
    function: str


def _calls(nodes: list[ast.stmt], name: str) -> list[ast.Call]:
    return [
        node
        for stmt in nodes
        for node in ast.walk(stmt)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == name
    ]


def _fallback_in(source: str, path: str) -> Fallback | None:
    try:
        module = ast.parse(source)
    except SyntaxError:
        return None
    for func in ast.walk(module):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            test = ast.unparse(node.test) if isinstance(node, ast.If) else ""
            if TARGET_FLAG not in test or DSPARK_HOOK not in test:
                continue
            assert isinstance(node, ast.If)
            if not _calls(node.body, DSPARK_HOOK):
                continue
            calls = _calls(node.orelse, DFLASH_HOOK)
            if calls:
                return Fallback(path, calls[0].lineno, func.name)
    return None


def dspark_dflash_fallback(tree: SGLangTree) -> Fallback | None:
    """Where a DSPARK target without ``set_dspark_layers_to_capture`` gets its capture
    configured through ``set_dflash_layers_to_capture`` (0.5.16+:
    ``configure_aux_hidden_state_capture``); None when the runner has no such fallback."""
    folder = tree.file(f"{tree.package}/{RUNNER_DIR}")
    if not folder.is_dir():
        return None
    for file in sorted(folder.rglob("*.py")):
        text = _read(file)
        if DSPARK_HOOK not in text or DFLASH_HOOK not in text:
            continue
        path = f"{tree.package}/{RUNNER_DIR}/{file.relative_to(folder).as_posix()}"
        found = _fallback_in(text, path)
        if found is not None:
            return found
    return None


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
