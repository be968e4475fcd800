"""Command run under ``family_check.shipped_test_env(tree)``: how the shipped family test
builds each of its stages.

    python -m sglang_support.family_build_probe TEST_FILE

Loads ``TEST_FILE`` (the generated ``test_pp_aux_capture_family.py``), sets SGLang's
parallel state up for one stage with the test utilities' ``init_parallel``, builds every
case of ``FAMILY`` twice with ``build_model`` and prints one JSON line:
``{model: {"constructed", "widths", "hidden_size", "logits_module", "same_weights"}}``.
"""

from __future__ import annotations

import json
import sys

import torch

from codemods.ppcheck.runner import free_port
from sglang_support.family_runner import load_test


def _probe(utils, case) -> dict:
    from torch import nn

    first = utils.build_model(case, 0, 1, None)
    second = utils.build_model(case, 0, 1, None)
    stand_ins = [m for m in first.modules() if isinstance(m, utils.StandInLayer)]
    config = first.config
    text = getattr(config, "text_config", None) or config
    a, b = first.state_dict(), second.state_dict()
    return {
        # Modules only the model's constructor builds (the assembled stand-in has none).
        "constructed": any(
            type(m).__module__.startswith("sglang.srt.layers.") for m in first.modules()
        ),
        "widths": sorted({int(layer.weight.shape[0]) for layer in stand_ins}),
        "hidden_size": int(text.hidden_size),
        "logits_module": isinstance(first.logits_processor, nn.Module),
        "same_weights": a.keys() == b.keys()
        and all(not a[k].is_floating_point() or torch.equal(a[k], b[k]) for k in a),
    }


def main(argv: list[str]) -> int:
    test = load_test(argv[0])
    from sglang.test import pp_aux_capture_family_models as utils

    utils.init_parallel(0, 1, free_port())
    out = {}
    for case in test.FAMILY:
        try:
            out[case[0]] = _probe(utils, case)
        except Exception as error:  # reported per model
            out[case[0]] = {"error": f"{type(error).__name__}: {error}"}
    sys.stdout.flush()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
