"""The validation resolves, from the source, the decoder stack a class's capture hook sets up.

Model files written here cover each way a constructor builds its stack (directly, a factory
method, a class attribute, a constructor parameter bound by a subclass's
``super().__init__`` call or by its default), a hook that delegates to another causal LM,
inheritance across files, and what cannot be told (a builder outside the model files, two
different classes): a class counts for a method only where each stack its hook sets up has
a ``forward`` whose class declares the method, and is refused where a stack is unknown.
"""

from __future__ import annotations

import textwrap

import pytest

from codemods.upstream.validation import refusals, stacks
from codemods.upstream.validation.model_classes import ModelClasses
from codemods.upstream.validation.relax import (
    REASONS_TABLE,
    _relays,
    render_helper,
)

HOOK = """
    def set_eagle3_layers_to_capture(self, layer_ids):
        self.capture_aux_hidden_states = self.pp_group.is_last_rank
        set_pp_aux_capture(self.model, self.pp_group, hidden_size=4)
"""

FILES = {
    "base.py": f"""
from torch import nn
from sglang.srt.layers.aux_hidden_states import set_pp_aux_capture


class BaseModel(nn.Module):
    pp_aux_relay_methods = ("EAGLE3",)

    def forward(self, x):
        return x


class BaseMoeModel(BaseModel):
    pass


class BaseForCausalLM(nn.Module):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__()
        self.model = self._init_model(config)

    def _init_model(self, config):
        return BaseModel(config)
{HOOK}

EntryClass = [BaseForCausalLM]
""",
    "other.py": f"""
from torch import nn
from sglang.srt.models import base
from sglang.srt.models.base import BaseForCausalLM, BaseModel
from sglang.srt.models.helpers import make_model


class OtherModel(nn.Module):
    def forward(self, x):
        return x


class OwnStack(BaseForCausalLM):
    def _init_model(self, config):
        return OtherModel(config)


class KeepsStack(BaseForCausalLM):
    def __init__(self, config, quant_config=None, prefix=""):
        super().__init__(config, quant_config, prefix)


class BodyAttr(nn.Module):
    body_cls = base.BaseMoeModel

    def __init__(self, config):
        super().__init__()
        self.model = self.body_cls(config)
{HOOK}

class BodyAttrOther(BodyAttr):
    body_cls = OtherModel


class Param(nn.Module):
    def __init__(self, config, quant_config=None, prefix="", language_model_cls=OtherModel):
        super().__init__()
        self.model = language_model_cls(config=config)
{HOOK}

class ParamChild(Param):
    def __init__(self, config, quant_config=None, prefix="", language_model_cls=BaseModel):
        super().__init__(config, quant_config, prefix, language_model_cls)


class Delegates(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = None
        if config.text:
            self.language_model = BaseForCausalLM(config)

    def set_eagle3_layers_to_capture(self, layer_ids):
        self.language_model.set_eagle3_layers_to_capture(layer_ids)


class DelegatesOwnStack(Delegates):
    def __init__(self, config):
        super().__init__(config)
        self.language_model = OwnStack(config)


class LocalImport(nn.Module):
    def __init__(self, config):
        super().__init__()
        from sglang.srt.models.base import BaseModel as Local

        self.model = Local(config)
{HOOK}

class Unknown(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = make_model(config)
{HOOK}

class Ambiguous(nn.Module):
    def __init__(self, config):
        super().__init__()
        if config.moe:
            self.model = base.BaseMoeModel(config)
        else:
            self.model = OtherModel(config)
{HOOK}

EntryClass = [OwnStack, KeepsStack, BodyAttr, BodyAttrOther, Param, ParamChild, Unknown, Ambiguous]
""",
}

ADMITTED = ["BaseForCausalLM", "KeepsStack", "BodyAttr", "ParamChild", "Delegates", "LocalImport"]
REFUSED = ["OwnStack", "BodyAttrOther", "Param", "DelegatesOwnStack", "Unknown", "Ambiguous"]


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> ModelClasses:
    root = tmp_path_factory.mktemp("models")
    for name, text in FILES.items():
        (root / name).write_text(textwrap.dedent(text))
    return ModelClasses(root)


def _key(name: str) -> tuple[str, str]:
    return ("base.py" if name == "BaseForCausalLM" else "other.py", name)


@pytest.mark.parametrize("name", ADMITTED)
def test_a_class_whose_hook_sets_up_a_declared_stack_is_admitted(classes, name):
    assert _relays(classes, _key(name), "EAGLE3", {})
    # It declares EAGLE3 only, and the class has no DFLASH hook.
    assert not _relays(classes, _key(name), "DFLASH", {})


@pytest.mark.parametrize("name", REFUSED)
def test_a_class_whose_stack_is_another_or_unknown_is_refused(classes, name):
    assert not _relays(classes, _key(name), "EAGLE3", {})


def test_the_stacks_resolved(classes):
    hook = "set_eagle3_layers_to_capture"
    assert stacks.hook_stacks(classes, _key("BodyAttr"), hook) == [("base.py", "BaseMoeModel")]
    assert stacks.hook_stacks(classes, _key("OwnStack"), hook) == [("other.py", "OtherModel")]
    assert stacks.hook_stacks(classes, _key("Delegates"), hook) == [("base.py", "BaseModel")]
    assert stacks.hook_stacks(classes, _key("Unknown"), hook) is None
    assert stacks.hook_stacks(classes, _key("Ambiguous"), hook) is None
    # A stack class that keeps its base's forward relays what that forward's class declares.
    assert stacks.stack_relays(classes, ("base.py", "BaseMoeModel"), "EAGLE3")


def test_a_class_whose_stack_cannot_be_told_is_refused_with_that_reason(classes):
    found = stacks.unresolved(classes)
    assert found == {"Unknown": refusals.UNRESOLVED, "Ambiguous": refusals.UNRESOLVED}
    helper = render_helper({}, found)
    assert f'"{refusals.UNRESOLVED}"' in helper.split("_UNRESOLVED = ", 1)[1].split("\n#", 1)[0]
    assert f'{REASONS_TABLE} = {{\n    "Unknown": _UNRESOLVED,\n' in helper
    # Without such a class the hook does not carry the reason.
    assert "_UNRESOLVED" not in render_helper({}, {})
