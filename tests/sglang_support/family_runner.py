"""Command run under ``family_check.shipped_test_env(tree)``: the shipped family test of a
tree, for several PP sizes in one process.

    python -m sglang_support.family_runner TEST_FILE PP[,PP...] [MODEL ...]

Loads ``TEST_FILE`` (the generated ``test_pp_aux_capture_family.py``) as a module, which
stands in for the GPU-only packages and imports SGLang once, imports the model modules of
the chosen cases, then calls the test's own ``run_family(pp, family_jobs(cases))`` for
each PP size with forked instead of spawned workers (each stage starts from this
process's imports instead of importing SGLang again).  Prints one JSON line:
``{"PP": [records of the last rank], ...}``, the records of the test's ``--json`` mode.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import os
import sys
from types import SimpleNamespace


def load_test(path: str):
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    path, sizes, *models = argv
    test = load_test(path)
    chosen = [case for case in test.FAMILY if not models or case[0] in models]
    for case in chosen:
        try:  # an import error shows again, per case, in the stage that builds it
            importlib.import_module(f"sglang.srt.models.{case[0]}")
        except Exception:
            pass
    test.mp = SimpleNamespace(get_context=lambda _method: multiprocessing.get_context("fork"))
    jobs = test.family_jobs(chosen)
    out = {int(size): test.run_family(int(size), jobs) for size in sizes.split(",")}
    sys.stdout.flush()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
