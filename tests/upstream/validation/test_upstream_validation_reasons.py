"""The reasons the validation gives for a model class that cannot capture under PP.

Fast: synthetic model files and family decisions.  ``refusal_reasons`` gives "its
constructor refuses pipeline parallelism" to the ``EntryClass`` members whose construction
runs the class the plan found asserting a single stage (``dead_returns``), and "it never
splits its layers" only where no model file it is built from reads a PP rank or a stage's
layers; every other class is left to the default reason.  SGLang 0.5.23 is driven by
``test_upstream_validation_refusals.py``.
"""

from __future__ import annotations

from pathlib import Path

from codemods.upstream.family.plan import REFUSES_PP, FamilyPlan, FileDecision
from codemods.upstream.validation import refusals
from codemods.upstream.validation.model_classes import ModelClasses

REFUSING = """\
class StackModel:
    def __init__(self):
        self.pp_group = get_pp_group()


class RefusingForCausalLM:
    def __init__(self):
        assert self.pp_group.is_first_rank and self.pp_group.is_last_rank


class Inherits(RefusingForCausalLM):
    pass


class OwnInit(RefusingForCausalLM):
    def __init__(self):
        pass


EntryClass = [RefusingForCausalLM, Inherits, OwnInit]
"""
SINGLE = """\
from sglang.srt.models.single_base import SingleBase


class SingleForCausalLM(SingleBase):
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        self.model.layers_to_capture = layer_ids


EntryClass = SingleForCausalLM
"""
SINGLE_BASE = """\
class SingleBase:
    def forward(self):
        for layer in self.layers:
            pass
"""
WRAPPER = """\
class WrapperForConditionalGeneration:
    def __init__(self):
        from sglang.srt.models.splitting import SplittingForCausalLM

        self.language_model = SplittingForCausalLM()


EntryClass = [WrapperForConditionalGeneration]
"""
SPLITTING = """\
class SplittingForCausalLM:
    def __init__(self):
        self.start_layer, self.end_layer = 0, 2
"""
DYNAMIC = """\
from sglang.srt.models.registry import import_model_classes


class DynamicForCausalLM:
    pass


EntryClass = [DynamicForCausalLM]
"""
FILES = {
    "refusing.py": REFUSING,
    "single.py": SINGLE,
    "single_base.py": SINGLE_BASE,
    "wrapper.py": WRAPPER,
    "splitting.py": SPLITTING,
    "dynamic.py": DYNAMIC,
    "registry.py": "def import_model_classes(name):\n    return {}\n",
}


def _kept(file: str, hook_class: str, reason: str, **fields) -> FileDecision:
    hook = f"{hook_class}.set_eagle3_layers_to_capture"
    return FileDecision(file, (hook,), (hook,), False, reason, **fields)


def test_reasons_follow_the_plan_and_the_model_files(tmp_path: Path):
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for name, text in FILES.items():
        (models / name).write_text(text)
    decisions = {
        "refusing.py": _kept(
            "refusing.py",
            "RefusingForCausalLM",
            f"{REFUSES_PP} (`assert ...`)",
            dead_returns=("RefusingForCausalLM.set_eagle3_layers_to_capture",),
        ),
        "single.py": _kept("single.py", "SingleForCausalLM", "no early return"),
        "wrapper.py": _kept("wrapper.py", "WrapperForConditionalGeneration", "x"),
        "dynamic.py": _kept("dynamic.py", "DynamicForCausalLM", "x"),
    }
    plan = FamilyPlan(models, decisions)
    found = refusals.refusal_reasons(plan, ModelClasses(models))
    assert found == {
        # The class that asserts one stage, and a subclass that runs its constructor.
        "RefusingForCausalLM": refusals.REFUSES_PP,
        "Inherits": refusals.REFUSES_PP,
        # Neither its file nor its base's reads a PP rank or a stage's layers.
        "SingleForCausalLM": refusals.NO_PP_SPLIT,
    }
    # ``OwnInit`` builds itself (its file reads a PP group); the wrapper imports a model
    # that splits, in a function; the dynamic one loads models by name: no claim.


def test_a_patched_file_gets_no_reason(tmp_path: Path):
    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    for name, text in FILES.items():
        (models / name).write_text(text)
    decision = FileDecision("single.py", (), (), True, "patched")
    plan = FamilyPlan(models, {"single.py": decision})
    assert refusals.refusal_reasons(plan, ModelClasses(models)) == {}
