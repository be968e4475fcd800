"""CUDA-graph sizing of the aux entry: mirror SGLang's DSPARK PP proxy sizing path.

CUDA graph runners preallocate the PP proxy buffers of non-first stages, one per key; a
key without a buffer is not carried through capture and replay. SGLang 0.5.21+ sizes its
DSPARK entry (``dspark_hidden_states``) along one path:

    model.get_pp_proxy_dspark_hidden_size()
      -> misc_utils.resolve_pp_proxy_dspark_hidden_size (0 on PP=1 and the first stage)
      -> ModelRunner.get_pp_proxy_dspark_hidden_size
      -> runner_utils/buffers.py (allocate_pp_proxy_tensors and both buffer builders)
      -> the decode and prefill CUDA graph runners.

The aux entry (``aux_hidden_states``, ``pp_aux_plan.AUX_ENTRY``) is sized along the same
path: every unit of that path (a function, a protocol, an ``if`` block, a parameter, a
keyword argument) gets a twin right after it for ``pp_proxy_aux_hidden_size``.  A file
already holding the twin is left as it is; a file without the path is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codemods.upstream.patchfile import FileChange
from codemods.upstream.sglang_tree import SGLangTree

#: The modules of the sizing path (0.5.21+), in the order the value travels backwards.
SIZING_MODULES = (
    "sglang.srt.model_executor.model_runner_components.misc_utils",
    "sglang.srt.model_executor.model_runner",
    "sglang.srt.model_executor.runner_utils.buffers",
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner",
)

#: DSPARK name -> aux name, applied to every copied unit.
RENAMES = (
    ("_SupportsDSparkPPProxy", "_SupportsAuxPPProxy"),
    ("pp_proxy_dspark_hidden_size", "pp_proxy_aux_hidden_size"),
    ('"dspark_hidden_states"', '"aux_hidden_states"'),
)
MARKER = re.compile(r"_SupportsDSparkPPProxy|pp_proxy_dspark_hidden_size")
DONE = "pp_proxy_aux_hidden_size"
BLOCK_START = re.compile(r"^\s*(@|def |class |if )")
DEFINITION = re.compile(r"^\s*(?:def|class)\s+(\w+)")


class SizingError(ValueError):
    """A file of the sizing path does not have the shape this module mirrors."""


@dataclass(frozen=True)
class Unit:
    start: int  # first line (a decorator for a decorated definition)
    end: int  # one past the last line

    def lines(self, lines: list[str]) -> list[str]:
        return lines[self.start : self.end]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def block_end(lines: list[str], head: int) -> int:
    """One past the last line of the block whose header is ``lines[head]``."""
    depth = _indent(lines[head])
    end = head + 1
    while end < len(lines) and _header_open(lines, head, end):
        end += 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and _indent(line) <= depth:
            break
        end += 1
    while end > head + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _header_open(lines: list[str], head: int, end: int) -> bool:
    """Whether the header starting at ``head`` still continues before ``end``."""
    text = "".join(lines[head:end])
    return text.count("(") > text.count(")") or not text.rstrip().endswith(":")


def bracket_end(lines: list[str], start: int) -> int:
    """One past the line that closes the brackets opened from ``lines[start]``."""
    balance = 0
    for index in range(start, len(lines)):
        balance += lines[index].count("(") - lines[index].count(")")
        if balance <= 0:
            return index + 1
    raise SizingError(f"unbalanced brackets from line {start + 1}")


def _unit_at(lines: list[str], index: int, path: str) -> Unit:
    line = lines[index]
    if BLOCK_START.match(line):
        definition = DEFINITION.match(line)
        if definition and not MARKER.search(definition.group(1)):
            raise SizingError(
                f"{path}:{index + 1}: the DSPARK size is a parameter on the line of "
                f"{definition.group(1)!r}; one parameter a line is expected"
            )
        start = index
        while start > 0 and lines[start - 1].lstrip().startswith("@"):
            start -= 1
        return Unit(start, block_end(lines, index))
    return Unit(index, bracket_end(lines, index))


def _renamed(text: str) -> str:
    for old, new in RENAMES:
        text = text.replace(old, new)
    return text


def _separator(lines: list[str], end: int) -> list[str]:
    """The blank lines that follow a unit, repeated between it and its twin."""
    blanks: list[str] = []
    while end + len(blanks) < len(lines) and not lines[end + len(blanks)].strip():
        blanks.append(lines[end + len(blanks)])
    return blanks


def mirror_dspark_sizing(text: str, path: str) -> str:
    """``text`` with a ``pp_proxy_aux_hidden_size`` twin after every DSPARK sizing unit.

    Raises ``SizingError`` naming ``path`` when the file has no DSPARK sizing (an SGLang
    release before 0.5.21) or the result does not compile.
    """
    if DONE in text:
        return text
    lines = text.splitlines(keepends=True)
    units: list[Unit] = []
    for index, line in enumerate(lines):
        if not MARKER.search(line) or (units and index < units[-1].end):
            continue
        unit = _unit_at(lines, index, path)
        if units and unit.start < units[-1].end:
            continue
        units.append(unit)
    if not units:
        raise SizingError(
            f"{path}: no DSPARK PP proxy sizing (pp_proxy_dspark_hidden_size) to mirror"
        )
    out: list[str] = []
    cursor = 0
    for unit in units:
        out += lines[cursor : unit.end]
        block = BLOCK_START.match(lines[unit.start]) is not None
        gap = _separator(lines, unit.end) if block else []
        out += gap
        out += [_renamed(line) for line in unit.lines(lines)]
        cursor = unit.end
    out += lines[cursor:]
    result = "".join(out)
    try:
        compile(result, path, "exec")
    except SyntaxError as err:
        raise SizingError(f"{path}: mirrored sizing does not compile: {err}") from err
    return result


def has_dspark_sizing(tree: SGLangTree) -> bool:
    """Whether every module of the sizing path exists and sizes the DSPARK entry."""
    for module in SIZING_MODULES:
        text = tree.read_text(tree.module_path(module))
        if text is None or not MARKER.search(text):
            return False
    return True


def sizing_changes(tree: SGLangTree) -> list[FileChange]:
    """The sizing path's files with the aux twin added; none on a tree without the
    DSPARK sizing path (SGLang before 0.5.21)."""
    if not has_dspark_sizing(tree):
        return []
    changes = []
    for module in SIZING_MODULES:
        path = tree.module_path(module)
        text = tree.read_text(path)
        changes.append(FileChange(path, text, mirror_dspark_sizing(text, path)))
    return [change for change in changes if change.changed]
