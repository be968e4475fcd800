"""The CUDA-graph sizing of the aux entry and the packer accessor as parts of the patch.

Both follow the capture-hook family: they apply when the family part rewrites model
files (its plan is ``plan.facts(facts.FAMILY)``).

* ``sizing``: along SGLang's DSPARK sizing path, renamed for every capture method
  (0.5.21+, ``graph_sizing.py``; the release's DSPARK contract kept for out-of-tree
  models, deprecated, ``dspark_alias.py``), or along a path added next to the residual bank's
  (0.5.17-0.5.20, ``graph_sizing_legacy.py``); with either, the buffers of the runner's
  dummy forwards (warm-up, autotune) get the entry too (``warmup_buffers.py``).  A
  release that sizes the CUDA-graph buffers of the PP handoff in another structure
  (``cuda_graph_runner.py``, ``input_buffers.py``, ``runner/base_runner.py``:
  0.4.10-0.5.16) is left out, and the answer says what that leaves broken; a release
  without such buffers is not applicable.  A patch of model files outside the family
  alone (``--models kimi_linear``) leaves the sizing out, and says so.
* ``packer``: ``AuxHiddenStatePacker.captured()`` where a rewritten forward packs its
  captures (``packer_access.py``).
"""

from __future__ import annotations

import re

from codemods.upstream import part
from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.facts import FAMILY
from codemods.upstream.sizing import packer_access
from codemods.upstream.sizing.dspark_alias import keep_dspark_contract_in
from codemods.upstream.sizing.graph_sizing import SIZING_MODULES, has_dspark_sizing, sizing_changes
from codemods.upstream.sizing.graph_sizing_legacy import has_legacy_shape, legacy_sizing_changes
from codemods.upstream.sizing.warmup_buffers import warmup_changes
from codemods.upstream.tree.sglang_tree import SGLangTree

#: A CUDA-graph buffer of the PP handoff's hidden states, where a graph runner (or the
#: buffers it uses) allocates them.
GRAPH_BUFFER = re.compile(r'"hidden_states":\s*torch\.zeros\(')
EXECUTOR = "sglang.srt.model_executor.__init__"
NO_FAMILY = "no model file of the capture-hook family is rewritten"


def _rewritten(plan: part.Plan) -> dict[str, str]:
    family = plan.facts(FAMILY)
    # A file whose dead early return alone is dropped calls no helper: nothing to size.
    return {} if family is None or not family.patched else family.rewritten()


def graph_buffers(tree: SGLangTree) -> str | None:
    """Patch path of the file under ``srt/model_executor/`` that allocates the CUDA-graph
    buffers of the PP handoff (``cuda_graph_runner.py``, ``input_buffers.py``,
    ``runner/base_runner.py`` ... by release); None: none does."""
    init = tree.module_path(EXECUTOR)
    folder = tree.file(init).parent
    if not folder.is_dir():
        return None
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "pp_proxy" in text and GRAPH_BUFFER.search(text):
            relative = path.relative_to(folder).as_posix()
            return f"{init.rsplit('/', 1)[0]}/{relative}"
    return None


def no_graph_buffer(code: str = "") -> str:
    """What a patch without the aux entry's CUDA-graph sizing leaves broken (``code``: the
    mark around code words, "`" in Markdown).  The graph runners capture each stage with a
    handoff built from their own buffers, which hold no aux entry, so the shipped relay of a
    stage that receives captures (``PPAuxRelay._received``) raises naming the layers."""
    return (
        "with CUDA graphs under PP the aux entry has no graph buffer, so a stage after the "
        f"first that receives earlier stages' captures raises {code}RuntimeError{code} "
        f"naming the missing layers; serve with {code}--disable-cuda-graph{code}"
    )


NO_GRAPH_BUFFER = no_graph_buffer()


def decide_sizing(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    if not _rewritten(plan):
        models = sorted(
            change.path.rsplit("/", 1)[-1]
            for decision in plan.decided.values()
            for change in decision.changes
            if change.role is Role.MODEL and change.changed
        )
        if models:
            return part.left_out(
                f"the sizing path follows the capture-hook family, and this patch rewrites "
                f"none of its files (only {', '.join(models)})",
                NO_GRAPH_BUFFER,
            )
        return part.not_applicable(NO_FAMILY)
    if has_dspark_sizing(tree):
        changes = sizing_changes(tree) + warmup_changes(tree)
        return part.applies(keep_dspark_contract_in(tree, changes))
    if has_legacy_shape(tree):
        return part.applies(legacy_sizing_changes(tree) + warmup_changes(tree))
    found = graph_buffers(tree)
    if found is None:
        return part.not_applicable("this release has no CUDA-graph buffers for the PP handoff")
    return part.left_out(
        f"{found} sizes the CUDA-graph buffers of the PP handoff for its own entries only, "
        "in a structure auxcap does not rewrite",
        NO_GRAPH_BUFFER,
    )


def decide_packer(tree: SGLangTree, plan: part.Plan) -> part.Decision:
    rewritten = _rewritten(plan)
    if not rewritten:
        return part.not_applicable(NO_FAMILY)
    path = tree.module_path(packer_access.MODULE)
    try:
        changes = packer_access.packer_access_changes(tree, rewritten.values(), plan.text(path))
    except ValueError as err:
        return part.cannot_apply(str(tree.file(path)), str(err).split(": ", 1)[-1])
    if not changes and not any(packer_access.PACKER in t for t in rewritten.values()):
        return part.not_applicable("no rewritten forward packs its captures")
    return part.applies(changes)


SIZING = part.Part("sizing", decide_sizing)
PACKER = part.Part("packer", decide_packer)
#: The modules the sizing part rewrites.
MODULES = SIZING_MODULES
