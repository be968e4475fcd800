"""``family_proxy_width.add_support_attribute``: a rewritten causal-LM class declares that it
relays its aux captures across pipeline stages, first in its body as SGLang places class
attributes, once."""

from __future__ import annotations

import libcst as cst

from codemods.upstream.family.proxy_width import SUPPORT_ATTR, add_support_attribute

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
    updated = add_support_attribute(cls)
    return updated, cst.Module(body=[updated]).code


def test_the_attribute_opens_the_class_body_before_its_comments():
    updated, text = _add(PLAIN)
    assert SUPPORT_ATTR == "supports_pp_aux_capture"
    assert text == PLAIN.replace(
        "    # BitandBytes", "    supports_pp_aux_capture = True\n\n    # BitandBytes"
    )
    assert add_support_attribute(updated) is updated


def test_the_attribute_follows_a_docstring():
    updated, text = _add(DOCUMENTED)
    assert text == DOCUMENTED.replace(
        '"""A causal LM."""\n', '"""A causal LM."""\n\n    supports_pp_aux_capture = True\n'
    )
    assert add_support_attribute(updated) is updated


def test_a_class_that_already_declares_support_is_left_alone():
    declared = PLAIN.replace(
        "    # BitandBytes", "    supports_pp_aux_capture: bool = False\n\n    # BitandBytes"
    )
    (cls,) = cst.parse_module(declared).body
    assert add_support_attribute(cls) is cls
