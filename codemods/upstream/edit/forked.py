"""Run one function over many items on two cores, sharing the parent's memory.

The rewrite of the touched model files needs their parsed trees, which are costly to send
to another process.  :func:`forked_map` forks: the child sees the parent's trees as they are
(copy-on-write), handles every other item and sends back only its results (text); the
parent handles the rest meanwhile.  Results come back in the order of ``items``.

Before::

    texts = [rewrite(file) for file in files]

After::

    texts = forked_map(rewrite, files)

Serial where forking is not safe or not worth it: no ``os.fork``, other threads running (a
forked child would inherit their locks), fewer than two items, or ``AUXCAP_JOBS=1``.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def _serial() -> bool:
    return (
        not hasattr(os, "fork")
        or threading.active_count() > 1
        or os.environ.get("AUXCAP_JOBS") == "1"
    )


def forked_map(
    func: Callable[[T], R], items: Sequence[T], weight: Callable[[T], float] | None = None
) -> list[R]:
    """``[func(item) for item in items]``, about half of the work (by ``weight``, else by
    count) in a forked child process.  An exception in the child is raised again in the
    parent (as ``RuntimeError`` carrying its traceback)."""
    if len(items) < 2 or _serial():
        return [func(item) for item in items]
    loads = [0.0, 0.0]
    shares: list[list[int]] = [[], []]
    order = sorted(range(len(items)), key=lambda k: -(weight(items[k]) if weight else 1.0))
    for k in order:  # the heaviest first, each to the less loaded side
        side = 0 if loads[0] <= loads[1] else 1
        shares[side].append(k)
        loads[side] += weight(items[k]) if weight else 1.0
    mine, theirs = sorted(shares[0]), sorted(shares[1])
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        status = 0
        try:
            try:
                payload: tuple[str, list[R] | str] = ("ok", [func(items[k]) for k in theirs])
            except BaseException:  # reported to the parent
                payload = ("error", traceback.format_exc())
                status = 1
            with os.fdopen(write_end, "wb") as pipe:
                pickle.dump(payload, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            sys.stdout.flush()
            os._exit(status)
    os.close(write_end)
    results: dict[int, R] = {}
    try:
        for k in mine:
            results[k] = func(items[k])
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise RuntimeError(f"rewriting in the second process failed:\n{value}")
    results.update(zip(theirs, value, strict=True))
    return [results[k] for k in range(len(items))]
