"""The width a rewritten hook passes (``proxy_width.hook_width``): the hidden size of the
config the class builds its decoder stack from, reached from ``self``, read off the
class's ``__init__``; a class whose stack's config cannot be reached that way is left
alone with the reason."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from codemods.upstream.family.plan import plan_family
from codemods.upstream.family.proxy_width import WidthUnknown, hook_width

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "upstream" / "family_llama_like.py"


def _width(init_body: str, receiver: str = "self.model", extra: str = "") -> str:
    source = (
        "class ForCausalLM(nn.Module):\n"
        "    def __init__(self, config, quant_config=None, prefix=''):\n"
        "        super().__init__()\n"
        + "".join(f"        {line}\n" for line in init_body.strip().splitlines())
        + extra
    )
    (cls,) = cst.parse_module(source).body
    assert isinstance(cls, cst.ClassDef)
    return hook_width(cls, receiver)


@pytest.mark.parametrize(
    "body, expected",
    [
        # The stack is built from the config the class keeps.
        ("self.config = config\nself.model = Stack(config, quant_config)", "self.config"),
        ("self.config = config\nself.model = Stack(config=config)", "self.config"),
        ("self.config = config\nself.model = Stack(self.config, prefix=p)", "self.config"),
        # From a part of it (a VL model's text config).
        (
            "self.config = config\nself.model = Stack(config.text_config, quant_config)",
            "self.config.text_config",
        ),
        # Through a local name assigned once.
        (
            "text_config = config.text_config\nself.config = config\n"
            "self.model = Stack(config=text_config)",
            "self.config.text_config",
        ),
        # The class keeps the part itself.
        (
            "text_config = config.text_config\nself.mm_config = config\n"
            "self.config = text_config\nself.model = None\n"
            "if not x:\n    self.model = Stack(text_config, quant_config)",
            "self.config",
        ),
        ("self.config = config.text_config\nself.model = Stack(config=self.config)", "self.config"),
    ],
)
def test_the_width_is_the_hidden_size_of_the_config_the_stack_is_built_from(body, expected):
    assert _width(body) == f"{expected}.hidden_size"


def test_a_factory_method_of_the_class_is_followed_to_the_argument_it_builds_with():
    factory = (
        "\n    def _init_model(self, quant_config, config, prefix=''):\n"
        "        return Stack(config, quant_config=quant_config, prefix=prefix)\n"
    )
    body = "self.config = config\nself.model = self._init_model(quant_config, config.llm)"
    assert _width(body, extra=factory) == "self.config.llm.hidden_size"
    body = "self.config = config\nself.model = self._init_model(None, config=config)"
    assert _width(body, extra=factory) == "self.config.hidden_size"


def test_another_receiver_is_read_the_same_way():
    body = "self.config = config\nself.language_model = Stack(config.text_config)"
    assert _width(body, "self.language_model") == "self.config.text_config.hidden_size"


@pytest.mark.parametrize(
    "body, reason",
    [
        ("self.model = Stack(config)", "no attribute `__init__` sets on `self` reaches `config`"),
        ("self.config = config\nself.model = Stack()", "from no one config it names"),
        ("self.config = config\nself.model = make(config)[0]", "does not build `self.model`"),
        (
            "self.config = config\nself.model = Stack(config)\nif x:\n"
            "    self.model = Stack(config.text_config)",
            "from no one config it names",
        ),
        (
            "self.config = config\nconfig = config.text_config\nself.model = Stack(config)",
            "binds `config` more than once",
        ),
        ("self.config = config\nself.model = Stack(cfg)", "binds `cfg` nowhere"),
        ("self.config = config\nself.model = Stack(get(config))", "from no one config it names"),
    ],
)
def test_a_stack_whose_config_cannot_be_reached_from_self_is_refused(body, reason):
    with pytest.raises(WidthUnknown, match=reason):
        _width(body)


def test_the_plan_leaves_such_a_file_alone_with_the_reason(tmp_path):
    source = FIXTURE.read_text()
    patched = tmp_path / "patched"
    patched.mkdir()
    (patched / FIXTURE.name).write_text(source)
    assert plan_family(patched).decisions[FIXTURE.name].patched
    kept = tmp_path / "kept"
    kept.mkdir()
    # The causal LM (the second class that keeps its config) no longer keeps it.
    head, _, tail = source.rpartition("        self.config = config\n")
    (kept / FIXTURE.name).write_text(head + tail)
    decision = plan_family(kept).decisions[FIXTURE.name]
    assert not decision.patched
    assert decision.reason.endswith("no attribute `__init__` sets on `self` reaches `config`")
    assert plan_family(kept).rewritten() == {}
