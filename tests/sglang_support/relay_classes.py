"""Ask the shipped ``relays_pp_aux_capture`` about the registered classes of model files.

Usage: ``python -m sglang_support.relay_classes STEM,STEM,...`` under ``env.sglang_env(tree)``
(a patched tree).  Imports ``sglang.srt.models.<stem>`` for each stem and prints one JSON
object: the ``__name__`` of each class of its ``EntryClass`` -> the capture methods (EAGLE3,
DFLASH, DSPARK) it relays, for the classes that relay any.
"""

from __future__ import annotations

import importlib
import json
import sys

from sglang.srt.layers.aux_hidden_states import relays_pp_aux_capture

METHODS = ("DFLASH", "DSPARK", "EAGLE3")


def main() -> None:
    found: dict[str, list[str]] = {}
    for stem in sys.argv[1].split(","):
        entry = getattr(importlib.import_module(f"sglang.srt.models.{stem}"), "EntryClass", [])
        for cls in entry if isinstance(entry, (list, tuple)) else [entry]:
            methods = [method for method in METHODS if relays_pp_aux_capture(cls, method)]
            if methods:
                found[cls.__name__] = methods
    print(json.dumps(found))


if __name__ == "__main__":
    main()
