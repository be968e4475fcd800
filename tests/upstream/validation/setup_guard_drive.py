"""Drive a patched SGLang tree's ``configure_aux_hidden_state_capture`` (0.5.16+) on CPU.

Usage: ``python setup_guard_drive.py KEYWORDS`` under ``env.sglang_env(tree)``, where
KEYWORDS is the JSON list of the keyword names ``ModelRunner`` passes the function in the
release (without ``pp_size``).  Prints one JSON object: whether a PP group is set up, the
methods the patched ``LlamaForCausalLM`` declares it relays, and case ->
``"configured"`` (the hook was called with the ids) or ``"raised <Error>: <message>"``.

The function is called as SGLang calls it: those keywords and no ``pp_size`` (SGLang's own
tests and any caller that does not pass it: one stage), and with ``pp_size`` 1 and 2.  No
PP group is initialised in the process.  The models: the patched ``LlamaForCausalLM``
(built without weights; only its class is asked), and ``Silent``, a module with the capture
hooks that declares no relay.  Their hooks are replaced by a recorder.
"""

from __future__ import annotations

import json
import sys
from unittest import mock

from sglang.srt.distributed import parallel_state
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.models.llama import LlamaForCausalLM
from torch import nn

HOOKS = {"EAGLE3": "set_eagle3_layers_to_capture", "DFLASH": "set_dflash_layers_to_capture"}
IDS = [1, 3]


class Silent(nn.Module):
    """Has the capture hooks, relays nothing."""

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        pass

    def set_dflash_layers_to_capture(self, layer_ids):
        pass


def _model(cls):
    model = cls.__new__(cls)
    nn.Module.__init__(model)
    return model


def _keywords(names: list[str], model, method: str) -> dict:
    values = {
        "model": model,
        "eagle_use_aux_hidden_state": method == "EAGLE3",
        "eagle_aux_hidden_state_layer_ids": IDS if method == "EAGLE3" else None,
        "dflash_use_aux_hidden_state": method == "DFLASH",
        "dflash_target_layer_ids": IDS if method == "DFLASH" else None,
        "is_dspark": False,
    }
    return {name: values[name] for name in names}


def _configure(names: list[str], cls, method: str, pp_size: int | None) -> str:
    kwargs = _keywords(names, _model(cls), method)
    if pp_size is not None:
        kwargs["pp_size"] = pp_size
    with mock.patch.object(cls, HOOKS[method]) as hook:
        try:
            configure_aux_hidden_state_capture(**kwargs)
        except Exception as err:  # noqa: BLE001 - the case records what was raised
            return f"raised {type(err).__name__}: {err}"
    return "configured" if hook.call_args == mock.call(IDS) else f"hook: {hook.call_args}"


def main() -> None:
    names = json.loads(sys.argv[1])
    out = {
        "pp_group": parallel_state._PP is not None,
        "declared": list(vars(LlamaForCausalLM).get("pp_aux_relay_methods", ())),
    }
    for cls in (LlamaForCausalLM, Silent):
        for method in HOOKS:
            for pp_size in (None, 1, 2):
                key = f"{cls.__name__}/{method}/{'as-sglang' if pp_size is None else pp_size}"
                out[key] = _configure(names, cls, method, pp_size)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
