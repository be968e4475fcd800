"""``family/proxy_width.add_support_attribute``: a rewritten causal-LM class declares the
capture methods it relays across pipeline stages, first in its body as SGLang places class
attributes, once."""

from __future__ import annotations

import libcst as cst

from codemods.upstream.family.proxy_width import SUPPORT_ATTR, add_support_attribute, relay_methods

PLAIN = """\
class LlamaForCausalLM(nn.Module):
    # BitandBytes specific attributes
    default_bitsandbytes_target_modules = [".q_proj."]

    def __init__(self, config) -> None:
        super().__init__()
"""

DOCUMENTED = '''\
class DeepForCausalLM(nn.Module):
    """A causal LM."""

    def __init__(self, config) -> None:
        super().__init__()
'''


def _add(text: str) -> tuple[cst.ClassDef, str]:
    (cls,) = cst.parse_module(text).body
    updated = add_support_attribute(cls, ("EAGLE3",))
    return updated, cst.Module(body=[updated]).code


def test_the_attribute_opens_the_class_body_before_its_comments():
    updated, text = _add(PLAIN)
    assert SUPPORT_ATTR == "pp_aux_relay_methods"
    assert text == PLAIN.replace(
        "    # BitandBytes", '    pp_aux_relay_methods = ("EAGLE3",)\n\n    # BitandBytes'
    )
    assert add_support_attribute(updated, ("EAGLE3",)) is updated


def test_the_attribute_follows_a_docstring():
    updated, text = _add(DOCUMENTED)
    assert text == DOCUMENTED.replace(
        '"""A causal LM."""\n', '"""A causal LM."""\n\n    pp_aux_relay_methods = ("EAGLE3",)\n'
    )
    assert add_support_attribute(updated, ("EAGLE3",)) is updated


def test_a_class_that_already_declares_support_is_left_alone():
    declared = PLAIN.replace(
        "    # BitandBytes", "    pp_aux_relay_methods: tuple = ()\n\n    # BitandBytes"
    )
    (cls,) = cst.parse_module(declared).body
    assert add_support_attribute(cls, ("EAGLE3",)) is cls


def test_the_methods_are_those_of_the_rewritten_hooks_in_a_fixed_order():
    hooks = ["set_dspark_layers_to_capture", "set_eagle3_layers_to_capture", "forward"]
    assert relay_methods(hooks) == ("EAGLE3", "DSPARK")
    assert relay_methods(["set_dflash_layers_to_capture"]) == ("DFLASH",)
    (cls,) = cst.parse_module(PLAIN).body
    assert add_support_attribute(cls, ()) is cls
    updated = add_support_attribute(cls, ("EAGLE3", "DFLASH"))
    assert 'pp_aux_relay_methods = ("EAGLE3", "DFLASH")\n' in cst.Module(body=[updated]).code


def test_a_known_last_stage_clause_is_restated_and_an_unknown_one_stays_stale():
    from codemods.upstream.family.gate import refresh_last_stage_comments

    source = (
        "def forward(self):\n"
        "    # Capture relies on the eager loop, so it is only supported when this\n"
        "    # rank owns the final pipeline stage (the aux list is consumed there).\n"
        "    # Gate on capture mode.\n"
        "    capture = self.flag and self.pp_group.is_last_rank\n"
    )
    fn = cst.parse_module(source).body[0]
    assert isinstance(fn, cst.FunctionDef)
    body, fixed = refresh_last_stage_comments(list(fn.body.body), [0])
    assert fixed
    text = cst.Module(body=[fn.with_changes(body=fn.body.with_changes(body=body))]).code
    assert "final pipeline stage" not in text
    assert (
        "eager loop; each pipeline stage captures the\n    # layers it runs for the last one.\n"
        in text
    )
    assert "    # Gate on capture mode.\n" in text
    other = source.replace("so it is only supported when this\n    # rank owns", "owned by")
    fn = cst.parse_module(other).body[0]
    assert isinstance(fn, cst.FunctionDef)
    body, fixed = refresh_last_stage_comments(list(fn.body.body), [0])
    assert not fixed and body == list(fn.body.body)
