"""Drive the runtime guard of a patched SGLang tree's ``ModelRunner`` on CPU.

Usage: ``python guard_drive.py`` under ``env.sglang_env(patched tree)`` (a release whose
runner calls the capture hooks in ``ModelRunner.init_aux_hidden_state_capture``, 0.5.11 to
0.5.15).  Prints one JSON object: case -> ``"configured"`` (the hook was called) or
``"raised: <message>"``.

The runner is the patched ``ModelRunner`` class; ``init_aux_hidden_state_capture`` runs
on a stand-in that has only what that method reads (the model, ``pp_size``, the capture
flags and ids).  The models are the release's own classes, built without weights (only the
class is asked); their hooks are replaced by a recorder, which gives no decoder stack a
relay, so what is checked is the guard's answer for the class itself: the patched ``LlamaForCausalLM``, which declares the methods it relays,
``Qwen2ForCausalLM``, whose file the patch leaves alone, and a subclass of the patched
class that builds its own stack (it defines ``__init__``), which the declaration does not
cover.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from unittest import mock

from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.models.qwen2 import Qwen2ForCausalLM
from torch import nn

HOOKS = {"EAGLE3": "set_eagle3_layers_to_capture", "DFLASH": "set_dflash_layers_to_capture"}


class OwnStack(LlamaForCausalLM):
    """Inherits the declaration, builds its own decoder stack."""

    def __init__(self):
        nn.Module.__init__(self)


def _model(cls):
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    return model


def _configure(cls, method: str, pp_size: int) -> str:
    runner = SimpleNamespace(
        model=_model(cls),
        pp_size=pp_size,
        eagle_use_aux_hidden_state=method == "EAGLE3",
        eagle_aux_hidden_state_layer_ids=[1, 3],
        dflash_use_aux_hidden_state=method == "DFLASH",
        dflash_target_layer_ids=[1, 3],
    )
    with mock.patch.object(cls, HOOKS[method]) as hook:
        try:
            ModelRunner.init_aux_hidden_state_capture(runner)
        except NotImplementedError as err:
            return f"raised: {err}"
    return "configured" if hook.call_args == mock.call([1, 3]) else f"hook: {hook.call_args}"


def main() -> None:
    out = {"declared": list(vars(LlamaForCausalLM).get("pp_aux_relay_methods", ()))}
    for cls in (LlamaForCausalLM, Qwen2ForCausalLM, OwnStack):
        for method in HOOKS:
            if not hasattr(cls, HOOKS[method]):
                continue
            for pp_size in (1, 2):
                out[f"{cls.__name__}/{method}/pp{pp_size}"] = _configure(cls, method, pp_size)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
