"""Time ``upstream-patch`` against one LibCST parse of the model files that define a capture
hook, side by side in one run.

    python scripts/bench_upstream.py [SGLANG_ROOT] [--rounds N]

SGLANG_ROOT defaults to the unpacked SGLang 0.5.23 wheel in auxcap's cache.  Each round
parses every model file with a ``set_*_layers_to_capture`` hook once (the reference), parses
them again as a run does (all trees kept to the end, Python's cyclic collector paused: a
second, stricter reference), then generates the whole patch (``generate`` and the patch
text) the way ``upstream-patch`` does; CPU time counts this process and its child
processes.  Prints the medians and the ratios the generator is held to: generation CPU /
parse CPU (against both references), and generation wall / generation CPU.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import libcst as cst  # noqa: E402

from codemods.upstream.generate import generate  # noqa: E402

HOOK = re.compile(rb"def set_\w+_layers_to_capture\(")
DEFAULT_ROOT = (
    Path(os.environ.get("AUXCAP_CACHE", Path.home() / ".cache" / "auxcap"))
    / "unpacked"
    / "sglang-0.5.23"
)


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def hook_files(root: Path) -> list[Path]:
    models = next(
        p
        for p in (root / "sglang" / "srt" / "models", root / "python" / "sglang" / "srt" / "models")
        if p.is_dir()
    )
    return sorted(p for p in models.glob("*.py") if HOOK.search(p.read_bytes()))


def timed(action) -> tuple[float, float]:
    gc.collect()
    cpu, wall = cpu_seconds(), time.perf_counter()
    action()
    return cpu_seconds() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = hook_files(args.root)
    texts = [path.read_text(encoding="utf-8") for path in files]

    def parse_all() -> None:
        for text in texts:
            cst.parse_module(text)

    def parse_all_paused() -> None:
        # As a run parses: every tree kept until the end, the cyclic collector paused.
        collecting = gc.isenabled()
        gc.disable()
        try:
            trees = [cst.parse_module(text) for text in texts]
            del trees
        finally:
            if collecting:
                gc.enable()

    def generate_all() -> None:
        assert generate(args.root).patch

    parse_cpu, paused_cpu, gen_cpu, gen_wall = [], [], [], []
    timed(generate_all)  # warm-up: imports and first-use caches
    for _ in range(args.rounds):
        parse_cpu.append(timed(parse_all)[0])
        paused_cpu.append(timed(parse_all_paused)[0])
        cpu, wall = timed(generate_all)
        gen_cpu.append(cpu)
        gen_wall.append(wall)
    parse, paused, cpu, wall = (
        statistics.median(x) for x in (parse_cpu, paused_cpu, gen_cpu, gen_wall)
    )
    print(f"tree: {args.root} ({len(files)} model files define a capture hook)")
    print(f"one LibCST parse of them:  {parse:6.2f} s CPU (median of {args.rounds})")
    print(f"  the same, as a run does: {paused:6.2f} s CPU (trees kept, collector paused)")
    print(f"upstream-patch:            {cpu:6.2f} s CPU, {wall:6.2f} s wall")
    print(f"ratio generation CPU / parse CPU: {cpu / parse:.2f}  (goal <= 1.5)")
    print(f"  against the parse as a run does: {cpu / paused:.2f}")
    print(f"ratio generation wall / CPU:      {wall / cpu:.2f}  (goal < 1)")


if __name__ == "__main__":
    main()
