"""Command run in a subprocess under ``env.sglang_env``: call a real capture hook of the
SGLang tree on ``PYTHONPATH`` on a bare causal-LM instance with a PP group of the given
size, and report, as one JSON line, whether it raised and what it stored.

    python -m sglang_support.refusal_check '{"model": "beam", "class": "BeamForCausalLM",
        "hook": "set_dflash_layers_to_capture", "layer_ids": [1, 4], "pp": [1, 2]}'

Per PP size: ``error`` (``"<type>: <message>"`` or ``None``) and ``ids`` (what the hook
stored on ``model.layers_to_capture``, ``None`` when it stored nothing).
"""

from __future__ import annotations

import importlib
import json
import sys
from types import SimpleNamespace

from torch import nn

from sglang_support.stages import FakePPGroup, bare


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    module = importlib.import_module(f"sglang.srt.models.{spec['model']}")
    report = {}
    for size in spec["pp"]:
        group = FakePPGroup(size - 1, size)
        lm = bare(getattr(module, spec["class"]))
        lm.config = SimpleNamespace(num_hidden_layers=9, hidden_size=4)
        lm.pp_group = group
        lm.model = nn.Module()
        lm.model.pp_group = group
        lm.model.config = lm.config
        lm.capture_aux_hidden_states = False
        try:
            getattr(lm, spec["hook"])(list(spec["layer_ids"]))
        except Exception as error:  # the hook's own refusal is what is reported
            outcome = f"{type(error).__name__}: {error}"
        else:
            outcome = None
        ids = getattr(lm.model, "layers_to_capture", None)
        report[str(size)] = {"error": outcome, "ids": None if ids is None else list(ids)}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
