"""The aux entry in the buffers of the runner's dummy forwards (warm-up, autotune).

Besides the CUDA-graph buffers (``graph_sizing.py``, ``graph_sizing_legacy.py``), SGLang
0.5.17+ builds one more set of PP proxy buffers for a forward:
``runner/base_runner.py``'s ``_allocate_decode_buffers``, which
``BaseRunner._alloc_dummy_decode_buffers`` calls for the dummy forwards of start-up (the
eager runner's FlashInfer MoE autotune, ``flashinfer_autotune.py`` on 0.5.18+, and the
PP-parallel DeepGEMM warm-up, ``deep_gemm_wrapper/compile_utils.py``).  ``_dummy_run``
hands the model a slice of every one of its entries, but the set holds
``hidden_states``/``residual``/``topk_indices`` only, so on a stage that receives
captures the relay raises (the handoff has no ``aux_hidden_states`` entry) before the
server is up.  The patch sizes the entry there the way the graph buffers size it, from
the same lookup (``ModelRunner.get_pp_proxy_aux_hidden_size``)::

    def _allocate_decode_buffers(                def _allocate_decode_buffers(
        ...                                          ...
        pp_proxy_residual_num_blocks: ... = None,    pp_proxy_residual_num_blocks: ... = None,
                                                     pp_proxy_aux_hidden_size: int = 0,
        ...                                          ...
            if pp_proxy_topk_size is not None:           if pp_proxy_topk_size is not None:
                ...["topk_indices"] = ...                    ...["topk_indices"] = ...
                                                         if pp_proxy_aux_hidden_size:
                                                             ...["aux_hidden_states"] = (
                                                                 torch.zeros(...))
    ...
        return _allocate_decode_buffers(             return _allocate_decode_buffers(
            ...                                          ...
            pp_proxy_residual_num_blocks=(...),          pp_proxy_residual_num_blocks=(...),
                                                         pp_proxy_aux_hidden_size=(
                                                             mr.get_pp_proxy_aux_hidden_size()),

The entry has the row bound of ``topk_indices`` (``max_num_token``), which ``_dummy_run``
slices to the dummy batch's tokens like the others; zeros of the width the previous stage
sends, so the relay takes them as the earlier stages' captures.

The other buffers built for a PP forward need nothing: the graph runners' are sized by the
modules above, and the dynamic-chunking profile (``scheduler_pp_mixin.py`` on
0.5.17-0.5.19, ``scheduler_components/dynamic_chunk_sizer.py`` on 0.5.20+) runs on the
first stage only, which receives no aux entry.  Releases before 0.5.17 get no sizing at
all (``part.py``): 0.5.14-0.5.16 keep their dummy-forward buffers as released, and earlier
releases have none.
"""

from __future__ import annotations

import re

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.sizing.graph_sizing import SizingError, block_end
from codemods.upstream.sizing.graph_sizing_legacy import (
    ALLOCATION,
    PARAMETER,
    TOPK_BLOCK,
    TOPK_ROWS,
)
from codemods.upstream.tree.sglang_tree import SGLangTree

MODULE = "sglang.srt.model_executor.runner.base_runner"
ALLOCATOR = re.compile(r"^def _allocate_decode_buffers\(")
DUMMY = re.compile(r"^    def _alloc_dummy_decode_buffers\(")
ARGUMENT = re.compile(
    r"^(\s+)pp_proxy_residual_num_blocks=mr\.get_pp_proxy_residual_num_blocks\(\),\n$"
)
DONE = "pp_proxy_aux_hidden_size"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _one(lines: list[str], pattern: re.Pattern[str], start: int, end: int) -> int | None:
    found = [k for k in range(start, end) if pattern.match(lines[k])]
    return found[0] if len(found) == 1 else None


def _block(lines: list[str], pattern: re.Pattern[str], path: str, what: str) -> tuple[int, int]:
    heads = [k for k, line in enumerate(lines) if pattern.match(line)]
    if len(heads) != 1:
        raise SizingError(f"{path}: expected one {what}, found {len(heads)}")
    return heads[0], block_end(lines, heads[0])


def has_dummy_buffers(text: str) -> bool:
    """Whether ``base_runner.py`` builds the dummy forwards' buffers with the units the aux
    entry follows (SGLang 0.5.17+)."""
    lines = _lines(text)
    allocators = [k for k, line in enumerate(lines) if ALLOCATOR.match(line)]
    dummies = [k for k, line in enumerate(lines) if DUMMY.match(line)]
    if len(allocators) != 1 or len(dummies) != 1:
        return False
    allocator, dummy = allocators[0], dummies[0]
    allocator_end, dummy_end = block_end(lines, allocator), block_end(lines, dummy)
    return (
        _one(lines, PARAMETER, allocator, allocator_end) is not None
        and _one(lines, TOPK_BLOCK, allocator, allocator_end) is not None
        and _one(lines, ARGUMENT, dummy, dummy_end) is not None
    )


def size_dummy_buffers(text: str, path: str) -> str:
    """``base_runner.py`` whose dummy-forward buffers carry the aux entry (see the module
    docstring); unchanged when it already does."""
    if DONE in text:
        return text
    lines = _lines(text)
    # Bottom-up, so the line numbers found first stay valid.
    dummy, dummy_end = _block(lines, DUMMY, path, "_alloc_dummy_decode_buffers")
    argument = _one(lines, ARGUMENT, dummy, dummy_end)
    if argument is None:
        raise SizingError(f"{path}:{dummy + 1}: no pp_proxy_residual_num_blocks= argument")
    indent = ARGUMENT.match(lines[argument]).group(1)  # type: ignore[union-attr]
    lines[argument + 1 : argument + 1] = [
        f"{indent}pp_proxy_aux_hidden_size=mr.get_pp_proxy_aux_hidden_size(),\n"
    ]
    allocator, allocator_end = _block(lines, ALLOCATOR, path, "_allocate_decode_buffers")
    topk = _one(lines, TOPK_BLOCK, allocator, allocator_end)
    if topk is None:
        raise SizingError(f"{path}:{allocator + 1}: no single topk_indices allocation")
    topk_end = block_end(lines, topk)
    rows = TOPK_ROWS.search("".join(lines[topk:topk_end]))
    if rows is None:
        raise SizingError(f"{path}:{topk + 1}: no row bound in the topk_indices block")
    indent = TOPK_BLOCK.match(lines[topk]).group(1)  # type: ignore[union-attr]
    lines[topk_end:topk_end] = _lines(ALLOCATION.format(indent=indent, rows=rows.group(1)))
    parameter = _one(lines, PARAMETER, allocator, allocator_end)
    if parameter is None:
        raise SizingError(f"{path}:{allocator + 1}: no pp_proxy_residual_num_blocks parameter")
    indent = PARAMETER.match(lines[parameter]).group(1)  # type: ignore[union-attr]
    lines[parameter + 1 : parameter + 1] = [f"{indent}pp_proxy_aux_hidden_size: int = 0,\n"]
    result = "".join(lines)
    try:
        compile(result, path, "exec")
    except SyntaxError as err:
        raise SizingError(f"{path}: sized module does not compile: {err}") from err
    return result


def warmup_changes(tree: SGLangTree) -> list[FileChange]:
    """``base_runner.py`` with the aux entry in the dummy forwards' buffers; none on a tree
    without them (or where they carry it already)."""
    path = tree.module_path(MODULE)
    text = tree.read_text(path)
    if text is None or DONE in text or not has_dummy_buffers(text):
        return []
    return [FileChange(path, text, size_dummy_buffers(text, path), RUNTIME, Role.WARMUP_SIZING)]
