"""The shipped init test's ranks on a patched copy, forked, with what the stages were sized to
and what their relays expect.

Usage: ``python -m sglang_support.width_check [--timeout S] [MODEL ...]`` under
``env.sglang_env`` of a patched copy (``family_check.patched_copy``: the shipped tests in
its ``shipped_tests/``); ``MODEL`` names keys of ``MODELS`` (default: all). The parent
imports the model modules once, then calls the shipped ``test_pp_aux_capture.py``'s own
``run_ranks`` with ranks forked from this process instead of from the test's fork server:
per rank the shipped ``init_parallel`` (gloo, ``tp_size=1``, ``pp_size=2``), per model the
class built with its tiny config (``TINY_MODELS``: 4 layers, hidden size 64), its capture
hook taking one capture on each stage, the width ``resolve_pp_proxy_aux_hidden_size`` gives
(``resolved``) and the buffer allocated with it (``buffer``), then stage 0's
``pp_aux_outgoing`` entry sent to stage 1 and collected there with ``pp_aux_collect``
(``sent``, ``ids``, ``collected``, ...).

To each record this adds ``stack`` and ``start_layer`` (the stack the hook set the relay up
on), ``ids`` (those this stage takes, as its relay keeps them), ``earlier`` (the capture
ids, as the hook keeps them, that stages before this one take: on
``<family>_layers_to_capture`` where the stack has it, else ``layers_to_capture``) and
``received`` (how many captures the relay expects from earlier stages). Prints one JSON line
``{"records": [...], "errors": [...], "pp_pynccl": [...]}`` (per rank, whether its PP group
set up PyNccl).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

from codemods.upstream.validation.shipped_tests import INIT_TEST_FILE
from sglang_support.family_runner import load_test
from sglang_support.shipped_utils import shipped_test_utils

_UTILS = shipped_test_utils()
HIDDEN = _UTILS.TINY_HIDDEN
NUM_LAYERS = _UTILS.TINY_LAYERS
MODELS = _UTILS.TINY_MODELS


def _stage_facts(stack: Any, hook: str) -> dict[str, Any]:
    """What the hook set up on ``stack``: see the module text."""
    ids = getattr(stack, hook.removeprefix("set_"), None)
    if ids is None:  # a hook that keeps its ids with the others
        ids = stack.layers_to_capture
    relay = stack.pp_aux_relay
    return {
        "stack": type(stack).__name__,
        "start_layer": int(stack.start_layer),
        "earlier": sorted(int(i) for i in ids if 0 <= int(i) < min(NUM_LAYERS, stack.start_layer)),
        "received": 0 if relay is None else len(relay.received_layer_ids),
        "ids": [] if relay is None else [int(i) for i in relay.local_layer_ids],
    }


def with_stage_facts(test: Any) -> None:
    """Wrap the shipped test's ``_check`` (one model on one rank) to add the stage's facts
    and whether the rank's PP group set up PyNccl."""
    check, stack_of, seen = test._check, test._stack, {}

    def _stack(lm):
        seen["stack"] = found = stack_of(lm)
        return found

    def _check(name, rank):
        seen.clear()
        record = check(name, rank)
        if "stack" in seen and "hook" in record:
            record.update(_stage_facts(seen["stack"], record["hook"]))
        group = importlib.import_module("sglang.srt.distributed.parallel_state")._PP
        record["pp_pynccl"] = bool(group.use_pynccl or group.pynccl_comm is not None)
        return record

    test._stack, test._check = _stack, _check


def main(argv: list[str]) -> int:
    timeout = 240.0
    if argv[:1] == ["--timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    names = argv or list(MODELS)
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):  # read by sglang.test.test_utils at import
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    tree = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]).parent
    test = load_test(str(tree / "shipped_tests" / INIT_TEST_FILE))
    for name in names:  # import once in the parent; the forked ranks share it
        try:
            importlib.import_module(f"sglang.srt.models.{MODELS[name][0]}")
        except BaseException:
            pass
    test.stage_processes = lambda *_modules: multiprocessing.get_context("fork")
    with_stage_facts(test)
    records, errors = test.run_ranks(names, timeout=timeout)
    pynccl = {r["rank"]: r["pp_pynccl"] for r in records if "pp_pynccl" in r}
    pp_pynccl = [pynccl[rank] for rank in sorted(pynccl)]
    print(json.dumps({"records": records, "errors": errors, "pp_pynccl": pp_pynccl}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
