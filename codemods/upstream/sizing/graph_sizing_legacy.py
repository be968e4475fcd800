"""CUDA-graph sizing of the aux entry on SGLang trees without a DSPARK sizing path.

SGLang 0.5.18-0.5.20 size the PP proxy buffers of non-first stages for
``hidden_states``/``residual`` (and DeepSeek-DSA's ``topk_indices``) only; the entry
``aux_hidden_states`` gets no buffer, so CUDA graph capture and replay drop it.  0.5.21
later added the DSPARK entry along one path; this module adds the aux entry along the
same path, next to the ``pp_proxy_residual_num_blocks`` units those releases have:

* ``misc_utils``: ``_SupportsAuxPPProxy`` and ``resolve_pp_proxy_aux_hidden_size``
  (0 on PP=1 and on the first stage; a model's own ``get_pp_proxy_aux_hidden_size`` where
  it defines one, else the helpers' one lookup, ``pp_aux_proxy_hidden_size(model)``), after
  ``resolve_pp_proxy_residual_num_blocks``;
* ``ModelRunner.get_pp_proxy_aux_hidden_size``, after
  ``get_pp_proxy_residual_num_blocks`` (same ``pp_size``/``pp_rank`` arguments);
* ``runner_utils/buffers.py``: a ``pp_proxy_aux_hidden_size: int = 0`` parameter after
  every ``pp_proxy_residual_num_blocks`` parameter, the keyword passed on where that one
  is, and after every ``topk_indices`` allocation an ``aux_hidden_states`` one with the
  same row bound;
* both graph runners: ``pp_proxy_aux_hidden_size=`` after their
  ``pp_proxy_residual_num_blocks=`` argument (0.5.18's prefill runner keeps no proxy
  buffers at all, so it has none);
* the decode runner's pre-planned ``load_batch`` branch (plan-stream load already ran,
  without the proxy) refreshes the proxy buffers from the incoming ``PPProxyTensors``,
  as the full load's ``fill_from`` does.

Before/after of a buffers allocation::

    if pp_proxy_topk_size is not None:           if pp_proxy_topk_size is not None:
        ...["topk_indices"] = torch.zeros(...)       ...["topk_indices"] = torch.zeros(...)
                                                 if pp_proxy_aux_hidden_size:
                                                     ...["aux_hidden_states"] = torch.zeros(
                                                         (max_num_token, pp_proxy_aux_hidden_size),
                                                         dtype=dtype,
                                                     )

Selected by what the tree holds: every module of the path exists, has the
``pp_proxy_residual_num_blocks`` units and no DSPARK sizing.  A file already holding
``pp_proxy_aux_hidden_size`` is left as it is.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.names import GLUE_MODULE, WIDTH
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.sizing.graph_sizing import (
    DONE,
    MARKER,
    SIZING_MODULES,
    SizingError,
    block_end,
    bracket_end,
)
from codemods.upstream.tree.sglang_tree import SGLangTree

MISC, RUNNER, BUFFERS, DECODE, PREFILL = SIZING_MODULES

RESOLVER_ANCHOR = re.compile(r"^def resolve_pp_proxy_residual_num_blocks\(")
METHOD_ANCHOR = re.compile(r"^    def get_pp_proxy_residual_num_blocks\(")
PARAMETER = re.compile(r"^(\s+)pp_proxy_residual_num_blocks: Optional\[int\] = None,\n$")
KEYWORD = re.compile(r"^(\s+)pp_proxy_residual_num_blocks=pp_proxy_residual_num_blocks,\n$")
TOPK_BLOCK = re.compile(r"^(\s+)if pp_proxy_topk_size is not None:\n$")
TOPK_ROWS = re.compile(r"\(\s*(\w+),\s*pp_proxy_topk_size\s*\)")
RUNNER_ARGUMENT = re.compile(r"^\s+pp_proxy_residual_num_blocks=")
PRE_PLANNED = re.compile(r"^(\s+)if not forward_batch\.needs_forward_metadata_init\(\):\n$")
#: SGLang's black line length.
LINE_LENGTH = 88
POSITIONS_COPY = "self.buffers.positions[: self.raw_num_token].copy_(forward_batch.positions)"

RESOLVER = f'''

@runtime_checkable
class _SupportsAuxPPProxy(Protocol):
    def get_pp_proxy_aux_hidden_size(self) -> int: ...


def resolve_pp_proxy_aux_hidden_size(*, model: Any, pp_size: int, pp_rank: int) -> int:
    """Return the width of the aux hidden states entry this stage receives."""
    if pp_size <= 1 or pp_rank == 0:
        return 0
    if isinstance(model, _SupportsAuxPPProxy):
        return model.get_pp_proxy_aux_hidden_size()
    return {WIDTH}(model)
'''

METHOD = """
    def get_pp_proxy_aux_hidden_size(self) -> int:
        return misc_utils.resolve_pp_proxy_aux_hidden_size(
            model=self.model,
{pp_args}        )
"""

ALLOCATION = """\
{indent}if pp_proxy_aux_hidden_size:
{indent}    pp_proxy_tensors["aux_hidden_states"] = torch.zeros(
{indent}        ({rows}, pp_proxy_aux_hidden_size), dtype=dtype
{indent}    )
"""

REFRESH = """\
{indent}if (
{indent}    pp_proxy_tensors is not None
{indent}    and self.buffers.pp_proxy_tensors is not None
{indent}):
{indent}    # The plan-stream load ran without the PP proxy: refresh the proxy
{indent}    # buffers the graph reads (aux_hidden_states included) as fill_from
{indent}    # does on the full load.
{indent}    for key, buf in self.buffers.pp_proxy_tensors.items():
{indent}        src = pp_proxy_tensors.tensors.get(key)
{indent}        if src is not None:
{indent}            buf[: src.shape[0]].copy_(src)
"""


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _anchor(lines: list[str], pattern: re.Pattern[str], path: str, what: str) -> int:
    found = [index for index, line in enumerate(lines) if pattern.match(line)]
    if len(found) != 1:
        raise SizingError(f"{path}: expected one {what}, found {len(found)}")
    return found[0]


def _checked(text: str, path: str) -> str:
    try:
        compile(text, path, "exec")
    except SyntaxError as err:
        raise SizingError(f"{path}: sized module does not compile: {err}") from err
    return text


def add_resolver(text: str, path: str) -> str:
    """misc_utils with the aux width resolver after the residual-bank one."""
    lines = _lines(text)
    end = block_end(lines, _anchor(lines, RESOLVER_ANCHOR, path, "residual resolver"))
    text = "".join(lines[:end] + _lines(RESOLVER) + lines[end:])
    module = add_from_import(cst.parse_module(text), "typing", ["Protocol", "runtime_checkable"])
    module = add_from_import(module, GLUE_MODULE, [WIDTH])
    return _checked(module.code, path)


def add_runner_method(text: str, path: str) -> str:
    """model_runner with ``get_pp_proxy_aux_hidden_size`` after the residual-bank getter,
    passing the same ``pp_size``/``pp_rank`` arguments."""
    lines = _lines(text)
    head = _anchor(lines, METHOD_ANCHOR, path, "get_pp_proxy_residual_num_blocks")
    end = block_end(lines, head)
    pp_args = [line for line in lines[head:end] if re.match(r"^\s+pp_(size|rank)=", line)]
    if len(pp_args) != 2:
        raise SizingError(f"{path}:{head + 1}: no pp_size=/pp_rank= arguments to pass on")
    method = METHOD.format(pp_args="".join(pp_args))
    return _checked("".join(lines[:end] + _lines(method) + lines[end:]), path)


def add_buffer_sizing(text: str, path: str) -> str:
    """buffers.py with the aux parameter, keyword and allocation next to the residual
    bank's parameter and keyword and the ``topk_indices`` allocation."""
    lines = _lines(text)
    out: list[str] = []
    parameters = keywords = allocations = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        if match := PARAMETER.match(line):
            out.append(f"{match.group(1)}pp_proxy_aux_hidden_size: int = 0,\n")
            parameters += 1
        elif match := KEYWORD.match(line):
            out.append(f"{match.group(1)}pp_proxy_aux_hidden_size=pp_proxy_aux_hidden_size,\n")
            keywords += 1
        elif match := TOPK_BLOCK.match(line):
            end = block_end(lines, index - 1)
            rows = TOPK_ROWS.search("".join(lines[index:end]))
            if rows is None:
                raise SizingError(f"{path}:{index}: no row bound in the topk_indices block")
            out += lines[index:end]
            out.append(ALLOCATION.format(indent=match.group(1), rows=rows.group(1)))
            index = end
            allocations += 1
    # Each function taking the size allocates with it or passes it on.
    if not parameters or parameters != keywords + allocations:
        raise SizingError(
            f"{path}: {parameters} pp_proxy_residual_num_blocks parameters, "
            f"{keywords} passed on, {allocations} topk_indices allocations"
        )
    return _checked("".join(out), path)


def add_runner_argument(text: str, path: str, required: bool) -> str:
    """A graph runner passing ``pp_proxy_aux_hidden_size`` after the residual bank's
    argument; unchanged when it has none and ``required`` is false."""
    lines = _lines(text)
    starts = [
        index
        for index, line in enumerate(lines)
        if RUNNER_ARGUMENT.match(line)
        and "get_pp_proxy_residual_num_blocks()" in "".join(lines[index : index + 3])
    ]
    if not starts:
        if required:
            raise SizingError(f"{path}: no pp_proxy_residual_num_blocks= argument")
        return text
    out: list[str] = []
    cursor = 0
    for start in starts:
        end = bracket_end(lines, start)
        out += lines[cursor:end]
        out += _twin_argument(lines[start:end])
        cursor = end
    out += lines[cursor:]
    return _checked("".join(out), path)


def _twin_argument(unit: list[str]) -> list[str]:
    """The residual bank's argument renamed for the aux entry, on one line when it fits
    (black drops the parentheses a shorter name no longer needs)."""
    twin = "".join(unit).replace("residual_num_blocks", "aux_hidden_size")
    indent = unit[0][: len(unit[0]) - len(unit[0].lstrip())]
    name, value = twin.strip().removesuffix(",").split("=", 1)
    value = value.strip()
    if value.startswith("(") and value.endswith(")"):
        value = value[1:-1].strip()
    flat = f"{indent}{name}={value},\n"
    return [flat] if "\n" not in value and len(flat) <= LINE_LENGTH + 1 else _lines(twin)


def add_pre_planned_refresh(text: str, path: str) -> str:
    """The decode runner whose pre-planned ``load_batch`` branch refreshes the proxy
    buffers after its ``positions`` copy; unchanged without such a branch or when the
    branch already refreshes them."""
    lines = _lines(text)
    for head, line in enumerate(lines):
        match = PRE_PLANNED.match(line)
        if match is None:
            continue
        end = block_end(lines, head)
        branch = lines[head:end]
        if any("pp_proxy_tensors" in body for body in branch):
            continue
        copies = [k for k, body in enumerate(branch) if body.strip() == POSITIONS_COPY]
        if len(copies) != 1:
            raise SizingError(f"{path}:{head + 1}: pre-planned branch without positions copy")
        at = head + copies[0] + 1
        indent = branch[copies[0]][: len(branch[copies[0]]) - len(branch[copies[0]].lstrip())]
        lines[at:at] = _lines(REFRESH.format(indent=indent))
        return _checked("".join(lines), path)
    return text


def has_legacy_shape(tree: SGLangTree) -> bool:
    """Whether the tree has the residual-bank units the aux sizing follows and no
    DSPARK sizing path (SGLang 0.5.18-0.5.20)."""
    found = [tree.read_text(tree.module_path(module)) for module in SIZING_MODULES[:4]]
    texts = [text for text in found if text is not None]
    if len(texts) != len(found) or any(MARKER.search(text) for text in texts):
        return False
    misc, runner, buffers, decode = texts
    return (
        any(RESOLVER_ANCHOR.match(line) for line in _lines(misc))
        and any(METHOD_ANCHOR.match(line) for line in _lines(runner))
        and any(PARAMETER.match(line) for line in _lines(buffers))
        and "get_pp_proxy_residual_num_blocks()" in decode
    )


def _sized_decode_runner(text: str, path: str) -> str:
    return add_pre_planned_refresh(add_runner_argument(text, path, required=True), path)


REWRITES = {
    MISC: add_resolver,
    RUNNER: add_runner_method,
    BUFFERS: add_buffer_sizing,
    DECODE: _sized_decode_runner,
    PREFILL: lambda text, path: add_runner_argument(text, path, required=False),
}


def legacy_sizing_changes(tree: SGLangTree) -> list[FileChange]:
    """The sizing path's files with the aux entry added; none on a tree without the
    legacy shape."""
    if not has_legacy_shape(tree):
        return []
    changes = []
    for module, rewrite in REWRITES.items():
        path = tree.module_path(module)
        text = tree.read_text(path)
        if text is None:
            continue
        new = text if DONE in text else rewrite(text, path)
        changes.append(FileChange(path, text, new, RUNTIME, Role.SIZING))
    return [change for change in changes if change.changed]
