"""``--enable-return-aux-hidden-states`` with PP stays refused on a patched 0.5.23 tree.

The patch makes the rewritten models relay their captures to the last stage, but only the
first pipeline rank returns output to the detokenizer and the PP output relay carries no
hidden states back to it, so the flag would give silently empty output under PP.  On a
patched copy of SGLang 0.5.23 (llama, whose EAGLE3 and DFLASH hooks the patch rewrites, and
deepseek_v4, whose DSPARK hook it rewrites), SGLang's own ``handle_aux_hidden_state_capture``
refuses the flag with ``pp_size=2`` for each capture method on a model class that relays it
(the patched validation hook's helper says so), with the reworded message; with
``pp_size=1`` it accepts the same cases.  The release's own check refuses with its old
message, which the patch replaces.
"""

from __future__ import annotations

import pytest
from sglang_support.env import run_check, sglang_tree
from sglang_support.family_check import patched_copy

from codemods.upstream.validation.relax import _AUX_FLAG_CHECK, AUX_FLAG_MESSAGE, _message_of

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

RELEASE = "0.5.23"
IDS = [1, 4]
#: case -> (served architecture, capture method): a class that relays that method.
RELAYING = {
    "llama_eagle3": ("LlamaForCausalLM", "EAGLE3"),
    "llama_dflash": ("LlamaForCausalLM", "DFLASH"),
    # No DSPARK hook: the runner configures DSPARK through the DFLASH hook.
    "llama_dspark": ("LlamaForCausalLM", "DSPARK"),
    "deepseek_v4_dspark": ("DeepseekV4ForCausalLM", "DSPARK"),
}


def _cases(pp_size: int) -> dict[str, dict]:
    return {
        name: dict(
            arch=arch,
            speculative_algorithm=method,
            pp_size=pp_size,
            **({} if method == "EAGLE3" else {"return_aux_hidden_state_layer_ids": IDS}),
        )
        for name, (arch, method) in RELAYING.items()
    }


def _check(root, cases: dict[str, dict]) -> dict[str, dict]:
    return run_check("validation_check", cases, root, timeout=600, mode="--aux")


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    result, copy = patched_copy(
        sglang_tree(RELEASE), tmp_path_factory.mktemp("aux"), models=["llama", "deepseek_v4"]
    )
    return result, copy


def test_aux_flag_with_pp_is_refused_for_every_method_of_a_relaying_model(patched):
    _result, copy = patched
    found = _check(copy, _cases(2))
    for name, (arch, method) in RELAYING.items():
        assert found[name]["relays"] is True, (name, arch, method, found[name])
        assert found[name]["outcome"] == f"refused: {AUX_FLAG_MESSAGE}", (name, found[name])


def test_aux_flag_without_pp_is_accepted_for_the_same_cases(patched):
    _result, copy = patched
    found = _check(copy, _cases(1))
    assert {name: found[name]["outcome"] for name in RELAYING} == dict.fromkeys(
        RELAYING, "accepted"
    )


def test_the_patch_replaces_the_release_message(patched):
    result, _copy = patched
    old = _message_of(_AUX_FLAG_CHECK)
    assert "only see the layers on the last pipeline rank" in old
    release = _check(sglang_tree(RELEASE), _cases(2))
    for name in RELAYING:
        assert release[name] == {"outcome": f"refused: {old}", "relays": None}, name
    change = next(c for c in result.changes if c.path.endswith("arg_groups/validation_hook.py"))
    assert old not in change.new.replace('"\n            "', "")
    assert change.new.count("--enable-return-aux-hidden-states only supports pp_size == 1") == 1
