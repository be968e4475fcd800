"""The previous release's DSPARK relay contract, kept (deprecated) for one release.

``graph_sizing.py`` renames SGLang 0.5.21+'s DSPARK entry and sizing path for every
capture method.  A model written against the release (out of tree,
``SGLANG_EXTERNAL_MODEL_PACKAGE``) that defines ``get_pp_proxy_dspark_hidden_size`` and
relays DSPARK captures itself in the ``dspark_hidden_states`` entry, as Kimi-Linear does
there, keeps working under PP:

* the shipped ``relays_pp_aux_capture`` admits it for DSPARK (``pp_aux_capture.py``);
* ``misc_utils.resolve_pp_proxy_aux_entry(model)`` names the entry its CUDA-graph and
  dummy-forward buffers are kept under: ``dspark_hidden_states`` for such a model,
  ``aux_hidden_states`` for every other; ``ModelRunner.get_pp_proxy_aux_entry`` hands it
  to the graph runners and the dummy-forward buffers (``pp_proxy_aux_entry=``), so the
  replay refresh, which copies each incoming entry into the buffer of its key, fills it;
* ``misc_utils.resolve_pp_proxy_dspark_hidden_size`` and the ``pp_proxy_dspark_hidden_size=``
  keyword of ``allocate_pp_proxy_tensors``, ``DecodeInputBuffers.create`` and
  ``PrefillInputBuffers.create`` stay as aliases of the renamed ones, with a deprecation
  warning (SGLang's logger, as for the old width method the resolver still asks).
"""

from __future__ import annotations

from codemods.catalog.methods import NATIVE
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.sizing.graph_sizing import SizingError, block_end
from codemods.upstream.tree.sglang_tree import SGLangTree

MISC = "sglang.srt.model_executor.model_runner_components.misc_utils"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
BUFFERS = "sglang.srt.model_executor.runner_utils.buffers"
GRAPH_RUNNERS = (
    "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
    "sglang.srt.model_executor.runner.prefill_cuda_graph_runner",
)
BASE_RUNNER = "sglang.srt.model_executor.runner.base_runner"

#: The end of the renamed resolver (``graph_sizing.RESOLVED``), then the deprecated alias
#: and the entry lookup.
_RESOLVER_END = """\
        return model.get_pp_proxy_dspark_hidden_size()
    return pp_aux_proxy_hidden_size(model)
"""
_ALIASES = f'''

def resolve_pp_proxy_dspark_hidden_size(
    *, model: Any, pp_size: int, pp_rank: int
) -> int:
    """Deprecated alias of resolve_pp_proxy_aux_hidden_size."""
    logger.warning(
        "resolve_pp_proxy_dspark_hidden_size is deprecated and will be removed in the "
        "next release; use resolve_pp_proxy_aux_hidden_size instead."
    )
    return resolve_pp_proxy_aux_hidden_size(
        model=model, pp_size=pp_size, pp_rank=pp_rank
    )


def resolve_pp_proxy_aux_entry(model: Any) -> str:
    """The PP proxy entry the previous stage sends aux hidden states in."""
    if not isinstance(model, _SupportsAuxPPProxy) and callable(
        getattr(model, "get_pp_proxy_dspark_hidden_size", None)
    ):
        # Out-of-tree models that relay {NATIVE.name} themselves send the old entry
        # (deprecated, kept for one release).
        return "dspark_hidden_states"
    return "aux_hidden_states"
'''

_RUNNER_WIDTH = "    def get_pp_proxy_aux_hidden_size(self) -> int:\n"
_RUNNER_ENTRY = """
    def get_pp_proxy_aux_entry(self) -> str:
        return misc_utils.resolve_pp_proxy_aux_entry(self.model)
"""

_IMPORTS = "from dataclasses import dataclass\n"
_LAST_IMPORT = "from sglang.srt.model_executor.input_buffers import ForwardInputBuffers\n\n"
_LOGGER = "logger = logging.getLogger(__name__)\n\n"
_ALLOCATE_PARAMETER = "    pp_proxy_aux_hidden_size: int = 0,\n) -> Dict[str, torch.Tensor]:\n"
_ALLOCATE_PARAMETERS = """\
    pp_proxy_aux_hidden_size: int = 0,
    pp_proxy_aux_entry: str = "aux_hidden_states",
    pp_proxy_dspark_hidden_size: Optional[int] = None,
) -> Dict[str, torch.Tensor]:
"""
_ALLOCATION = """\
    if pp_proxy_aux_hidden_size:
        pp_proxy_tensors["aux_hidden_states"] = torch.zeros(
"""
_ALIASED_ALLOCATION = """\
    if pp_proxy_dspark_hidden_size is not None:
        logger.warning(
            "pp_proxy_dspark_hidden_size= is deprecated and will be removed in the "
            "next release; pass pp_proxy_aux_hidden_size= instead."
        )
        pp_proxy_aux_hidden_size = pp_proxy_dspark_hidden_size
    if pp_proxy_aux_hidden_size:
        pp_proxy_tensors[pp_proxy_aux_entry] = torch.zeros(
"""
_CREATE_PARAMETER = "        pp_proxy_aux_hidden_size: int = 0,\n"
_CREATE_PARAMETERS = """\
        pp_proxy_aux_hidden_size: int = 0,
        pp_proxy_aux_entry: str = "aux_hidden_states",
        pp_proxy_dspark_hidden_size: Optional[int] = None,
"""
_CREATE_ARGUMENT = "                    pp_proxy_aux_hidden_size=pp_proxy_aux_hidden_size,\n"
_CREATE_ARGUMENTS = """\
                    pp_proxy_aux_hidden_size=pp_proxy_aux_hidden_size,
                    pp_proxy_aux_entry=pp_proxy_aux_entry,
                    pp_proxy_dspark_hidden_size=pp_proxy_dspark_hidden_size,
"""
_GRAPH_ARGUMENT = (
    "            pp_proxy_aux_hidden_size=self.model_runner.get_pp_proxy_aux_hidden_size(),\n"
)
_GRAPH_ENTRY = "            pp_proxy_aux_entry=self.model_runner.get_pp_proxy_aux_entry(),\n"

_DUMMY_PARAMETER = "    pp_proxy_aux_hidden_size: int = 0,\n"
_DUMMY_ENTRY_PARAMETER = '    pp_proxy_aux_entry: str = "aux_hidden_states",\n'
_DUMMY_ALLOCATION = '                pp_proxy_tensors["aux_hidden_states"] = torch.zeros(\n'
_DUMMY_KEYED = "                pp_proxy_tensors[pp_proxy_aux_entry] = torch.zeros(\n"
_DUMMY_ARGUMENT = "            pp_proxy_aux_hidden_size=mr.get_pp_proxy_aux_hidden_size(),\n"
_DUMMY_ENTRY = "            pp_proxy_aux_entry=mr.get_pp_proxy_aux_entry(),\n"


def _replace(text: str, old: str, new: str, path: str, count: int = 1) -> str:
    if text.count(old) != count:
        raise SizingError(f"{path}: expected {count} of {old.strip()!r}, found {text.count(old)}")
    return text.replace(old, new)


def _after(text: str, anchor: str, added: str, path: str, count: int = 1) -> str:
    return _replace(text, anchor, anchor + added, path, count)


def keep_dspark_contract(text: str, module: str, path: str) -> str:
    """``text`` of ``module``, renamed and resolved by ``graph_sizing.py`` (or sized by
    ``warmup_buffers.py``), with the previous release's DSPARK contract kept."""
    if module == MISC:
        return _after(text, _RESOLVER_END, _ALIASES, path)
    if module == MODEL_RUNNER:
        lines = text.splitlines(keepends=True)
        heads = [k for k, line in enumerate(lines) if line == _RUNNER_WIDTH]
        if len(heads) != 1:
            raise SizingError(f"{path}: expected one {_RUNNER_WIDTH.strip()!r}")
        end = block_end(lines, heads[0])
        return "".join(lines[:end]) + _RUNNER_ENTRY + "".join(lines[end:])
    if module == BUFFERS:
        text = _replace(text, _IMPORTS, "import logging\n" + _IMPORTS, path)
        text = _after(text, _LAST_IMPORT, _LOGGER, path)
        text = _replace(text, _ALLOCATE_PARAMETER, _ALLOCATE_PARAMETERS, path)
        text = _replace(text, _ALLOCATION, _ALIASED_ALLOCATION, path)
        text = _replace(text, _CREATE_PARAMETER, _CREATE_PARAMETERS, path, 2)
        return _replace(text, _CREATE_ARGUMENT, _CREATE_ARGUMENTS, path, 2)
    if module in GRAPH_RUNNERS:
        return _after(text, _GRAPH_ARGUMENT, _GRAPH_ENTRY, path)
    if module == BASE_RUNNER:
        text = _after(text, _DUMMY_PARAMETER, _DUMMY_ENTRY_PARAMETER, path)
        text = _replace(text, _DUMMY_ALLOCATION, _DUMMY_KEYED, path)
        return _after(text, _DUMMY_ARGUMENT, _DUMMY_ENTRY, path)
    return text


def keep_dspark_contract_in(tree: SGLangTree, changes: list[FileChange]) -> list[FileChange]:
    """``changes`` (the renamed sizing path and the dummy-forward buffers of ``tree``)
    with the previous release's DSPARK contract kept in their new texts."""
    modules = {
        tree.module_path(module): module
        for module in (MISC, MODEL_RUNNER, BUFFERS, *GRAPH_RUNNERS, BASE_RUNNER)
    }
    kept = []
    for change in changes:
        module = modules.get(change.path)
        new = (
            change.new if module is None else keep_dspark_contract(change.new, module, change.path)
        )
        kept.append(FileChange(change.path, change.old, new, change.group, change.role))
    return kept
