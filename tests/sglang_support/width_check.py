"""Build patched causal LMs through their real ``__init__`` as 2 PP stages (gloo, CPU)
and report the width of the aux entry each stage says it receives.

Usage: ``python -m sglang_support.width_check [MODEL ...]`` with a patched SGLang tree on
``PYTHONPATH`` (see ``env.sglang_env``); ``MODEL`` names keys of ``MODELS`` (default:
all).  The parent imports the model modules once and forks two ranks; each rank
initialises SGLang's distributed environment and model-parallel groups (gloo,
``tp_size=1``, ``pp_size=2``) with the shipped test utilities' ``init_parallel``, then for every
model builds the causal LM with the tiny config the shipped init test builds it with
(``TINY_MODELS`` of the shipped test utilities, ``sglang_support.shipped_utils``:
``num_hidden_layers=4``, ``hidden_size=64``), calls its capture hook (EAGLE3, else
DFLASH, else DSPARK; see ``HOOKS``) with one capture on each stage and records the width
the runner's ``misc_utils.resolve_pp_proxy_aux_hidden_size`` gives (the helpers' one
lookup);
then stage 0 hands captures as wide as the hidden states to stage 1 in the
``aux_hidden_states`` entry ``pp_aux_outgoing`` makes (over a gloo send) and stage 1
collects them with ``pp_aux_collect``.  The ranks agree after each build and each hook (a failure on either
rank skips what follows on both), so a failure never leaves a peer waiting in the
hook's handshake or the handoff; the parent gives up after ``--timeout`` seconds.

Prints one JSON line: ``{"records": [...], "errors": [...], "pp_pynccl": [...]}`` (per
rank, whether its PP group set up PyNccl); a record per model and
rank: ``model``, ``cls``, ``rank``, ``width``, ``earlier`` (the capture ids, as the hook
keeps them, that stages before this one take), ``received`` (how many captures the relay
expects from earlier stages), ``ids`` (the capture ids this stage takes, as the relay
keeps them), ``stack`` (the decoder stack's class), on stage 1 ``sent`` (the
width of the entry stage 0 handed over) and ``collected`` (see ``_handoff``), and
``error`` where something raised.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

import torch

from sglang_support.shipped_utils import shipped_test_utils
from sglang_support.stage_check import fork_ranks

#: The tiny configs of the patched causal LMs, those the shipped init test builds
#: (``TINY_MODELS`` of the shipped test utilities): 4 layers, hidden size 64.
_UTILS = shipped_test_utils()
HIDDEN = _UTILS.TINY_HIDDEN
NUM_LAYERS = _UTILS.TINY_LAYERS
MODELS = _UTILS.TINY_MODELS
_config = _UTILS.tiny_config
PP_SIZE = 2
TOKENS = 3
AUX_ENTRY = "aux_hidden_states"
#: Hook arguments: one capture on each stage of the 4 layers (stage 0 runs [0, 2)),
#: whether the hook shifts the ids by one (EAGLE3's "after layer i") or not.
CAPTURE_IDS = [0, 2]


def _all_ok(ok: bool) -> bool:
    flags: list[Any] = [None] * PP_SIZE
    torch.distributed.all_gather_object(flags, ok)
    return all(flags)


#: The capture hooks, in the order tried, and the stack attribute of their ids.
HOOKS = (
    ("set_eagle3_layers_to_capture", "layers_to_capture"),
    ("set_dflash_layers_to_capture", "layers_to_capture"),
    ("set_dspark_layers_to_capture", "dspark_layers_to_capture"),
)


def _hook(lm: Any) -> str:
    """Call the first capture hook ``lm`` has; the stack attribute of its ids."""
    for hook, ids_attr in HOOKS:
        if hasattr(lm, hook):
            getattr(lm, hook)(list(CAPTURE_IDS))
            return ids_attr
    raise RuntimeError(f"{type(lm).__name__} has no capture hook")


def _stack(lm: Any) -> Any:
    """The decoder stack the hook set the capture up on."""
    for module in lm.modules():
        if "pp_aux_relay" in vars(module):
            return module
    raise RuntimeError(f"no module of {type(lm).__name__} holds pp_aux_relay")


def _handoff(stack: Any, rank: int) -> dict[str, Any]:
    """Stage 0 hands its captures (``TOKENS`` rows as wide as the hidden states, layer
    id + 1 everywhere) to stage 1: the entry ``pp_aux_outgoing`` adds to its
    ``PPProxyTensors`` goes over a gloo send (as the PP handoff carries it), and stage 1
    collects all captures with ``pp_aux_collect``.  Stage 1 gets ``sent`` (the width of
    the entry stage 0 handed over, 0 without one) and ``collected`` (the first value of
    each capture, in the order returned)."""
    from sglang.srt.layers.aux_hidden_states import pp_aux_collect, pp_aux_outgoing

    relay = stack.pp_aux_relay
    if relay is None:
        raise RuntimeError("the hook set no relay up on this stage")
    captures = [
        torch.full((TOKENS, relay.hidden_size), float(i + 1)) for i in relay.local_layer_ids
    ]
    if rank == 0:
        shape = torch.tensor([-1, -1])
        try:
            entry = pp_aux_outgoing(stack, captures, None).get(AUX_ENTRY)
            shape = torch.tensor([0, 0] if entry is None else list(entry.shape))
        finally:
            torch.distributed.send(shape, dst=1)
        if entry is not None:
            torch.distributed.send(entry.contiguous(), dst=1)
        return {}
    shape = torch.zeros(2, dtype=torch.int64)
    torch.distributed.recv(shape, src=0)
    if int(shape[0]) < 0:
        raise RuntimeError("stage 0 failed to hand its captures over")
    incoming = {}
    if int(shape[1]) > 0:
        incoming[AUX_ENTRY] = torch.empty(tuple(shape.tolist()))
        torch.distributed.recv(incoming[AUX_ENTRY], src=0)
    collected = pp_aux_collect(stack, captures, incoming)
    return {
        "sent": int(shape[1]),
        "collected": [float(tensor[0, 0]) for tensor in collected],
    }


def _capture(lm: Any, rank: int) -> dict[str, Any]:
    """Call the capture hook; the stage's ids, reported width and what the handoff of
    its captures gave (see ``_handoff``)."""
    got: dict[str, Any] = {}
    stack = None
    try:
        ids_attr = _hook(lm)
        stack = _stack(lm)
        ids = getattr(stack, ids_attr, None)
        if ids is None:  # a DSPARK hook that keeps its ids with the others
            ids = stack.layers_to_capture
        got["stack"] = type(stack).__name__
        got["start_layer"] = int(stack.start_layer)
        got["earlier"] = sorted(
            int(i) for i in ids if 0 <= int(i) < min(NUM_LAYERS, stack.start_layer)
        )
        relay = stack.pp_aux_relay
        # The ids as the relay keeps them (some hooks store shifted ones): those this
        # stage takes, after as many as it receives.
        got["received"] = 0 if relay is None else len(relay.received_layer_ids)
        got["ids"] = [] if relay is None else [int(i) for i in relay.local_layer_ids]
        from sglang.srt.model_executor.model_runner_components import misc_utils

        got["width"] = int(
            misc_utils.resolve_pp_proxy_aux_hidden_size(model=lm, pp_size=PP_SIZE, pp_rank=rank)
        )
    except BaseException:
        got["error"] = "hook: " + traceback.format_exc()[-3000:]
    if _all_ok("error" not in got):
        try:
            got.update(_handoff(stack, rank))
        except BaseException:
            got["error"] = "handoff: " + traceback.format_exc()[-3000:]
    else:
        got.setdefault("error", "hook failed on the other rank")
    return got


def _check(name: str, rank: int) -> dict[str, Any]:
    module, cls_name, _, _ = MODELS[name]
    record: dict[str, Any] = {"model": name, "cls": cls_name, "rank": rank}
    lm = None
    try:
        cls = getattr(importlib.import_module(f"sglang.srt.models.{module}"), cls_name)
        with torch.device("cpu"):
            lm = cls(config=_config(name))
    except BaseException:
        record["error"] = "build: " + traceback.format_exc()[-3000:]
    if not _all_ok(lm is not None):
        record.setdefault("error", "build failed on the other rank")
        return record
    record.update(_capture(lm, rank))
    return record


def main(argv: list[str]) -> int:
    timeout = 240.0
    if argv[:1] == ["--timeout"]:
        timeout, argv = float(argv[1]), argv[2:]
    names = argv or list(MODELS)
    for name in names:  # import once in the parent; the forked ranks share it
        try:
            importlib.import_module(f"sglang.srt.models.{MODELS[name][0]}")
        except BaseException:
            pass
    importlib.import_module("sglang.srt.distributed.parallel_state")
    importlib.import_module("sglang.srt.server_args")

    def rank_run(rank: int, port: int) -> dict[str, Any]:
        _UTILS.init_parallel(rank, PP_SIZE, port, timeout=60)
        pp_group = importlib.import_module("sglang.srt.distributed.parallel_state")._PP
        pynccl = bool(pp_group.use_pynccl or pp_group.pynccl_comm is not None)
        return {"records": [_check(name, rank) for name in names], "pp_pynccl": pynccl}

    ranks = fork_ranks(rank_run, PP_SIZE, timeout)
    done = [got for state, got in ranks.values() if state == "ok"]
    records = [record for got in done for record in got["records"]]
    errors = [f"rank {rank}: {state}" for rank, (state, _) in ranks.items() if state != "ok"]
    pynccl = [got["pp_pynccl"] for got in done]
    print(json.dumps({"records": records, "errors": errors, "pp_pynccl": pynccl}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
