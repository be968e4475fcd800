"""The validation change relaxes DFLASH with PP only where the tree lets DFLASH run with PP.

Fast: a synthetic tree with one patched model file (EAGLE3 and DFLASH hooks rewritten), a
``validation_hook.py`` of 0.5.21+'s shape and a ``speculative_hook.py`` that refuses DFLASH
with PP (as 0.5.21-0.5.23's ``_handle_dflash`` does) or not.  The real releases are driven by
``test_upstream_validation_releases.py``.
"""

from __future__ import annotations

from pathlib import Path

from codemods.upstream.family.plan import FamilyPlan, FileDecision, ForwardRef
from codemods.upstream.tree.sglang_tree import detect_tree
from codemods.upstream.validation.relax import (
    _ANCHOR,
    _EAGLE_CHECK,
    _EAGLE_MESSAGE,
    HELPER_NAME,
    METHODS_TABLE,
    REASONS_TABLE,
    dflash_refusal,
    patched_architectures,
    validation_changes,
)

PKG = "sglang"
HOOKS = ("set_eagle3_layers_to_capture", "set_dflash_layers_to_capture")
MODEL = """\
class LlamaForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = layer_ids

    def set_dflash_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = layer_ids


class LlamaDerived(LlamaForCausalLM):
    pass


EntryClass = [LlamaForCausalLM, LlamaDerived]
"""
VALIDATION_HOOK = (
    "from typing import Any\n\n\n"
    + _ANCHOR
    + "    if cfg.pp_size == 1:\n        return\n"
    + _EAGLE_CHECK
    + _EAGLE_MESSAGE
    + "        )\n"
)
REFUSING = """\
def _handle_dflash(cfg):
    if cfg.pp_size != 1:
        raise ValueError("Currently DFLASH speculative decoding only supports pp_size == 1.")


def _handle_dspark(cfg):
    if cfg.pp_size != 1:
        if cfg.disaggregation_mode != "prefill":
            raise ValueError("DSPARK with PP needs PD prefill")
"""
ALLOWING = """\
def _handle_dflash(cfg):
    if cfg.pp_size != 1:
        cfg.dflash_pp = True
"""
DFLASH_BRANCH = 'cfg.speculative_algorithm.upper() == "DFLASH"'


def _tree(tmp_path: Path, speculative_hook: str | None):
    models = tmp_path / PKG / "srt" / "models"
    hooks = tmp_path / PKG / "srt" / "arg_groups"
    models.mkdir(parents=True)
    hooks.mkdir()
    (tmp_path / PKG / "__init__.py").write_text("")
    (models / "llama.py").write_text(MODEL)
    (hooks / "validation_hook.py").write_text(VALIDATION_HOOK)
    if speculative_hook is not None:
        (hooks / "speculative_hook.py").write_text(speculative_hook)
    decision = FileDecision(
        "llama.py",
        tuple(f"LlamaForCausalLM.{h}" for h in HOOKS),
        tuple(f"LlamaForCausalLM.{h}" for h in HOOKS),
        True,
        "patched",
        ForwardRef("llama.py", "LlamaModel"),
        ("entry-callback",),
        (("LlamaForCausalLM", "LlamaModel", HOOKS),),
    )
    return detect_tree(tmp_path), FamilyPlan(models, {"llama.py": decision})


def test_a_speculative_hook_refusing_dflash_keeps_dflash_refused(tmp_path):
    tree, plan = _tree(tmp_path, REFUSING)
    refusal = dflash_refusal(tree)
    assert refusal is not None
    assert (refusal.path, refusal.function, refusal.condition) == (
        f"{PKG}/srt/arg_groups/speculative_hook.py",
        "_handle_dflash",
        "cfg.pp_size != 1",
    )
    result = validation_changes(tree, plan)
    assert result.dflash_refused == refusal
    new = result.change.new
    # EAGLE3 is relaxed for the patched architectures; DFLASH gets no branch of its own.
    assert f'if algorithm == "EAGLE3":\n            {HELPER_NAME}(cfg, "EAGLE3")' in new
    assert DFLASH_BRANCH not in new and f'{HELPER_NAME}(cfg, "DFLASH")' not in new
    assert "EAGLE3 or DFLASH" not in new and "and EAGLE3 for models" in new
    # The report still lists DFLASH as a relayed capture convention (a DSPARK target reaches
    # the DFLASH hook); the hook answers from its table of the relaying architectures,
    # and asks the model class the loader resolves for any other one.
    assert result.architectures == {
        "LlamaDerived": ("DFLASH", "EAGLE3"),
        "LlamaForCausalLM": ("DFLASH", "EAGLE3"),
    }
    table = (
        f'{METHODS_TABLE} = {{\n    "LlamaDerived": ("DFLASH", "EAGLE3"),\n'
        '    "LlamaForCausalLM": ("DFLASH", "EAGLE3"),\n}'
    )
    assert table in new
    assert f"{REASONS_TABLE} = {{}}" in new
    assert "model_cls, arch = get_model_architecture(model_config)" in new
    assert "relays_pp_aux_capture(model_cls, method)" in new
    compile(new, "validation_hook.py", "exec")


def test_a_speculative_hook_letting_dflash_through_gets_the_dflash_branch(tmp_path):
    for name, hook in (("allowing", ALLOWING), ("absent", None)):
        tree, plan = _tree(tmp_path / name, hook)
        assert dflash_refusal(tree) is None, name
        result = validation_changes(tree, plan)
        assert result.dflash_refused is None
        new = result.change.new
        assert DFLASH_BRANCH in new and f'{HELPER_NAME}(cfg, "DFLASH")' in new, name
        assert "EAGLE3 or DFLASH for" in new
        assert f'if algorithm == "EAGLE3":\n            {HELPER_NAME}(cfg, "EAGLE3")' in new
        compile(new, "validation_hook.py", "exec")


def test_a_conditional_dflash_check_does_not_keep_dflash_refused(tmp_path):
    guarded = REFUSING.replace(
        '    if cfg.pp_size != 1:\n        raise ValueError("Currently DFLASH',
        '    if cfg.pp_size != 1:\n        if cfg.disaggregation_mode != "prefill":\n'
        '            raise ValueError("Currently DFLASH',
        1,
    )
    assert guarded != REFUSING
    tree, plan = _tree(tmp_path, guarded)
    assert dflash_refusal(tree) is None
    assert DFLASH_BRANCH in validation_changes(tree, plan).change.new


OTHER = """\
from sglang.srt.models import llama
from sglang.srt.models.llama import LlamaForCausalLM as Base


class GlmForCausalLM:
    def set_eagle3_layers_to_capture(self, layer_ids):
        self.model.layers_to_capture = layer_ids


class Inherits(Base):
    x = 1


class OwnForward(Base):
    def forward(self):
        pass


class Quiet:
    pass


class Loud:
    def forward(self):
        pass


class MixedIn(Quiet, Base):
    pass


class MixedForward(Loud, llama.LlamaForCausalLM):
    pass


EntryClass = [GlmForCausalLM, Inherits, OwnForward, MixedIn, MixedForward]
"""


def test_subclasses_in_another_patched_file_count_by_the_runtime_rule(tmp_path):
    """An ``EntryClass`` member whose declaring base is in another model file counts when
    its method resolution order reaches the declaration before any ``__init__``,
    ``forward`` or hook of its own (``relays_pp_aux_capture``)."""
    tree, plan = _tree(tmp_path, REFUSING)
    (plan.models_dir / "glm.py").write_text(OTHER)
    plan.decisions["glm.py"] = FileDecision(
        "glm.py",
        ("GlmForCausalLM.set_eagle3_layers_to_capture",),
        ("GlmForCausalLM.set_eagle3_layers_to_capture",),
        True,
        "patched",
        ForwardRef("glm.py", "GlmModel"),
        ("entry-callback",),
        (("GlmForCausalLM", "GlmModel", ("set_eagle3_layers_to_capture",)),),
    )
    found = patched_architectures(plan)
    assert found == {
        "GlmForCausalLM": ("EAGLE3",),
        "Inherits": ("DFLASH", "EAGLE3"),
        "LlamaDerived": ("DFLASH", "EAGLE3"),
        "LlamaForCausalLM": ("DFLASH", "EAGLE3"),
        "MixedIn": ("DFLASH", "EAGLE3"),
    }
