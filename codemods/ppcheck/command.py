"""The ``validate-pp`` command: build the matrix, run it, print the table, pick the exit
code (0: every scenario passed, 1: a scenario failed or hung, 2: cannot run here)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from codemods.ppcheck.runner import format_table, run_scenarios, summarize
from codemods.ppcheck.scenario import build_matrix

MODES = {"relay": ("relay",), "direct": ("direct",), "both": ("relay", "direct")}


def validate_pp(
    world_size: int = 4,
    backend: str = "gloo",
    mode: str = "both",
    timeout: float = 60.0,
    select: str | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Run the scenario matrix for world sizes 2..``world_size``; return the exit code."""
    if backend == "nccl":
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < world_size:
            echo(f"error: --backend nccl needs {world_size} GPUs (one per rank), found {gpus}")
            return 2
    scenarios = build_matrix(world_size, MODES[mode], select=select)
    if not scenarios:
        echo(f"error: no scenario matches {select!r}")
        return 2
    started = time.monotonic()

    def progress(result) -> None:
        mark = "." if result.passed else "F"
        sys.stderr.write(mark)
        sys.stderr.flush()

    results = run_scenarios(scenarios, backend=backend, timeout=timeout, on_result=progress)
    sys.stderr.write("\n")
    echo(format_table(results))
    echo(
        f"{summarize(results)} in {time.monotonic() - started:.1f}s "
        f"(world sizes 2..{world_size}, backend {backend}, mode {mode})"
    )
    return 0 if all(r.passed for r in results) else 1
