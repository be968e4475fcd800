#!/usr/bin/env python3
"""Benchmark ``auxcap migrate --diff`` over the SGLang 0.5.20 package tree.

Downloads the sglang==0.5.20 wheel once (``pip download --no-deps``, cached in
``~/.cache/auxcap/wheels``), unpacks it once (``~/.cache/auxcap/trees/sglang-0.5.20``) and
prints, side by side from one run:

* ``auxcap migrate --diff TREE``: wall time (median of ``--repeat`` runs) and peak memory;
* the same with ``--no-prefilter`` (every file parsed), once;
* with ``--baseline``: a bare ``libcst.parse_module`` of every file, in one process;
* with ``--baseline-libcst-cli``: LibCST's own codemod CLI running a minimal guard codemod
  over a copy of the tree (slow: minutes);
* with ``--crossover``: where worker processes start to pay (``scan --jobs 1`` against
  ``--jobs 2`` over growing sets of the largest files);
* files that need parsing: ``auxcap migrate --check -j 1`` over one large model-runner-shaped
  file (``fixtures/bench/model_runner.py``, about 2,800 lines with several hook calls) against
  one ``libcst.parse_module`` of the same file, CPU time, median of ``--repeat`` runs (skip
  with ``--skip-large-file``);

and checks that both auxcap runs print identical diffs and report the same call sites.

Peak memory is measured two ways: the largest single process (``ru_maxrss`` from ``wait4``,
which covers the process and its waited-for children) and the whole process tree (the sum of
the RSS of the process and all its descendants, sampled from ``/proc`` every 10 ms).

Run from the repository root:  python scripts/bench_migrate.py --baseline --repeat 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "auxcap"
VERSION = "0.5.20"
#: Measured separately on this machine (2 cores): LibCST's codemod CLI running a minimal
#: guard codemod over the same tree.
LIBCST_CLI_SECONDS = 8 * 60 + 13
LIBCST_CLI_CPU_SECONDS = 507


def wheel() -> Path:
    wheels = CACHE / "wheels"
    found = sorted(wheels.glob(f"sglang-{VERSION}-*.whl"))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            f"sglang=={VERSION}",
            "-d",
            str(wheels),
        ],
        check=True,
    )
    return sorted(wheels.glob(f"sglang-{VERSION}-*.whl"))[0]


def tree() -> Path:
    target = CACHE / "trees" / f"sglang-{VERSION}"
    package = target / "sglang"
    if not (target / ".complete").exists():
        shutil.rmtree(target, ignore_errors=True)
        with zipfile.ZipFile(wheel()) as archive:
            archive.extractall(target)
        (target / ".complete").write_text("")
    return package


@dataclass
class Run:
    seconds: float
    cpu_seconds: float
    max_process_kb: int
    tree_peak_kb: int
    returncode: int
    stdout: bytes
    stderr: bytes


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children") as handle:
                    queue.extend(int(child) for child in handle.read().split())
            except OSError:
                pass
    return found


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, IndexError, ValueError):
        return 0


def measure(command: list[str], cwd: Path = ROOT) -> Run:
    """Wall time, largest process and peak process-tree RSS of one command."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], sum(_rss_kb(pid) for pid in _descendants(process.pid)))
                done.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        cpu = usage.ru_utime + usage.ru_stime
        return Run(
            seconds, cpu, usage.ru_maxrss, peak[0], process.returncode, out.read(), err.read()
        )


def auxcap(*args: str) -> list[str]:
    return [sys.executable, "-m", "codemods", *args]


def summary_line(run: Run) -> str:
    lines = [line for line in run.stderr.decode().splitlines() if "file(s) scanned" in line]
    return lines[-1] if lines else "(no summary)"


PARSE_ALL = """
import sys, libcst
from codemods.sources.collect import collect_files
for path in collect_files([sys.argv[1]]):
    with open(path, "rb") as handle:
        libcst.parse_module(handle.read())
"""

MINIMAL_GUARD = """
import libcst as cst
from libcst.codemod import VisitorBasedCodemodCommand

HOOKS = {"set_dspark_layers_to_capture", "set_dflash_layers_to_capture",
         "set_eagle3_layers_to_capture", "set_msd_layers_to_capture"}


class GuardCommand(VisitorBasedCodemodCommand):
    DESCRIPTION = "Guard capture-hook calls on their first argument."

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if len(updated_node.body) != 1 or not isinstance(updated_node.body[0], cst.Expr):
            return updated_node
        call = updated_node.body[0].value
        if (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value in HOOKS
            and call.args
        ):
            return cst.If(test=call.args[0].value,
                          body=cst.IndentedBlock(body=[updated_node]))
        return updated_node
"""


def libcst_cli(source_tree: Path) -> Run:
    with tempfile.TemporaryDirectory() as work:
        work_path = Path(work)
        (work_path / "minimal_guard.py").write_text(MINIMAL_GUARD)
        (work_path / ".libcst.codemod.yaml").write_text(
            "generated_code_marker: '@generated'\nformatter: []\nblacklist_patterns: []\n"
            "modules: ['minimal_guard']\nrepo_root: '.'\n"
        )
        copy = work_path / "sglang"
        shutil.copytree(source_tree, copy)
        command = [
            sys.executable,
            "-m",
            "libcst.tool",
            "codemod",
            "--no-format",
            "--hide-progress",
            "minimal_guard.GuardCommand",
            "sglang",
        ]
        return measure(command, cwd=work_path)


def crossover(source_tree: Path) -> None:
    """Time ``scan --jobs 1`` and ``--jobs 2`` over the k largest files, for growing k."""
    files = sorted(source_tree.rglob("*.py"), key=lambda p: p.stat().st_size, reverse=True)
    print("\ncrossover: scan --no-prefilter over the k largest files (median of 3)")
    print(f"{'files':>6} {'KB':>8} {'--jobs 1':>10} {'--jobs 2':>10}")
    for count in (1, 2, 4, 8, 16):
        with tempfile.TemporaryDirectory() as work:
            for index, path in enumerate(files[count * 7 : count * 8]):  # mid-sized files
                shutil.copy(path, Path(work) / f"f{index:03d}.py")
            size = sum(p.stat().st_size for p in Path(work).iterdir()) // 1024
            times = {}
            for jobs in (1, 2):
                runs = [
                    measure(auxcap("scan", "--no-prefilter", "--jobs", str(jobs), work)).seconds
                    for _ in range(3)
                ]
                times[jobs] = statistics.median(runs)
            print(f"{count:>6} {size:>8} {times[1]:>9.2f}s {times[2]:>9.2f}s")


LARGE_FILE = ROOT / "fixtures" / "bench" / "model_runner.py"

PARSE_ONE = """
import sys, libcst
libcst.parse_module(open(sys.argv[1], "rb").read())
"""

#: In one process, after a first parse that warms LibCST up: CPU of one parse, of parse +
#: discovery, and of the whole per-file migrate.
IN_PROCESS = """
import sys, time, libcst
from codemods.callers.analyse import analyse
from codemods.callers.transform import TransformOptions, transform_source
data = open(sys.argv[1], "rb").read()
def cpu(work):
    start = time.process_time()
    work()
    return time.process_time() - start
libcst.parse_module(data)
parse = cpu(lambda: libcst.parse_module(data))
analysis = cpu(lambda: analyse(libcst.parse_module(data), sys.argv[1]))
transform = cpu(lambda: transform_source(data, sys.argv[1], TransformOptions()))
print(parse, analysis, transform)
"""


def large_file(repeat: int) -> None:
    """The "files that need parsing" case, side by side in one run."""
    size = LARGE_FILE.stat().st_size
    lines = LARGE_FILE.read_bytes().count(b"\n")
    print(
        f"\nlarge file: {LARGE_FILE.relative_to(ROOT)} ({lines} lines, {size // 1024} KB), "
        f"median of {repeat}"
    )
    check = [
        measure(auxcap("migrate", "--check", "-j", "1", str(LARGE_FILE))) for _ in range(repeat)
    ]
    parse_process = [
        measure([sys.executable, "-c", PARSE_ONE, str(LARGE_FILE)]) for _ in range(repeat)
    ]
    inner = []
    for _ in range(repeat):
        run = measure([sys.executable, "-c", IN_PROCESS, str(LARGE_FILE)])
        inner.append([float(value) for value in run.stdout.split()])
    parse = statistics.median(row[0] for row in inner)
    analysis = statistics.median(row[1] for row in inner)
    transform = statistics.median(row[2] for row in inner)
    check_cpu = statistics.median(run.cpu_seconds for run in check)
    parse_cpu = statistics.median(run.cpu_seconds for run in parse_process)
    print("in one process, LibCST warmed up:")
    print(f"{'one libcst.parse_module':46} {parse:7.2f}s CPU   1.0x")
    print(f"{'parse + discovery (in process)':46} {analysis:7.2f}s CPU {analysis / parse:5.1f}x")
    print(
        f"{'  discovery alone':46} {analysis - parse:7.2f}s CPU {(analysis - parse) / parse:5.1f}x"
    )
    print(
        f"{'parse + discovery + rewrite + verify':46} {transform:7.2f}s CPU "
        f"{transform / parse:5.1f}x"
    )
    print("whole processes (interpreter start, imports, a cold LibCST):")
    print(f"{'python: import libcst, parse the file once':46} {parse_cpu:7.2f}s CPU   1.0x")
    print(f"{'auxcap migrate --check -j 1':46} {check_cpu:7.2f}s CPU {check_cpu / parse_cpu:5.1f}x")
    print(f"exit codes of --check: {sorted({run.returncode for run in check})} (1: changes needed)")
    print(
        f"targets: discovery <= 1.5x one parse: {(analysis - parse) / parse <= 1.5}; "
        f"migrate --check <= 1.5x a parsing process: {check_cpu / parse_cpu <= 1.5}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of the fast case")
    parser.add_argument("--baseline", action="store_true", help="also parse every file")
    parser.add_argument(
        "--baseline-libcst-cli", action="store_true", help="also run LibCST's codemod CLI (minutes)"
    )
    parser.add_argument(
        "--skip-no-prefilter",
        action="store_true",
        help="skip the every-file auxcap run (several minutes)",
    )
    parser.add_argument(
        "--crossover", action="store_true", help="also measure where worker processes start to pay"
    )
    parser.add_argument("--tree", type=Path, help="an unpacked tree instead of the wheel's")
    parser.add_argument(
        "--skip-large-file", action="store_true", help="skip the one-large-file case"
    )
    args = parser.parse_args()

    source_tree = args.tree or tree()
    count = sum(1 for _ in source_tree.rglob("*.py"))
    print(
        f"tree: {source_tree} ({count} .py files); {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"python: {sys.version.split()[0]}")

    fast_runs = [measure(auxcap("migrate", "--diff", str(source_tree))) for _ in range(args.repeat)]
    fast = min(
        fast_runs,
        key=lambda run: abs(run.seconds - statistics.median(r.seconds for r in fast_runs)),
    )
    fast_seconds = statistics.median(run.seconds for run in fast_runs)
    rows = [("auxcap migrate --diff", fast_seconds, fast)]
    print(
        "auxcap migrate --diff runs (wall/CPU): "
        + ", ".join(f"{r.seconds:.2f}s/{r.cpu_seconds:.2f}s" for r in fast_runs)
    )
    cpu_median = statistics.median(run.cpu_seconds for run in fast_runs)

    ok = all(run.returncode in (0, 1) for run in fast_runs)
    ok &= len({run.stdout for run in fast_runs}) == 1
    slow = None
    if not args.skip_no_prefilter:
        slow = measure(auxcap("migrate", "--diff", "--no-prefilter", str(source_tree)))
        rows.append(("auxcap migrate --diff --no-prefilter", slow.seconds, slow))
    parse_all = None
    if args.baseline:
        parse_all = measure([sys.executable, "-c", PARSE_ALL, str(source_tree)])
        rows.append(("libcst.parse_module of every file", parse_all.seconds, parse_all))
    cli_run = None
    if args.baseline_libcst_cli:
        cli_run = libcst_cli(source_tree)
        rows.append(("LibCST codemod CLI, minimal guard", cli_run.seconds, cli_run))

    print(f"\n{'':40} {'wall':>9} {'CPU':>9} {'max process':>12} {'process tree':>13}")
    for label, seconds, run in rows:
        print(
            f"{label:40} {seconds:8.2f}s {run.cpu_seconds:8.2f}s "
            f"{run.max_process_kb / 1024:10.1f}MB {run.tree_peak_kb / 1024:11.1f}MB"
        )
    if cli_run is None:
        print(
            f"{'LibCST codemod CLI (measured separately)':40} {LIBCST_CLI_SECONDS:8.2f}s "
            f"{LIBCST_CLI_CPU_SECONDS:8.2f}s"
        )

    print(f"\nprefilter on : {summary_line(fast)}")
    if slow is not None:
        print(f"prefilter off: {summary_line(slow)}")
        same = slow.stdout == fast.stdout and summary_line(slow) == summary_line(fast)
        print(f"identical diffs and call sites with the prefilter on and off: {same}")
        ok &= same and slow.returncode == fast.returncode
        print(f"speed-up from the prefilter: {slow.seconds / fast_seconds:.0f}x")
    if parse_all is not None:
        print(
            f"faster than parsing every file: {parse_all.seconds / fast_seconds:.0f}x wall, "
            f"{parse_all.cpu_seconds / cpu_median:.0f}x CPU (target >= 40x)"
        )
    cli_seconds = cli_run.seconds if cli_run is not None else LIBCST_CLI_SECONDS
    cli_cpu = cli_run.cpu_seconds if cli_run is not None else LIBCST_CLI_CPU_SECONDS
    print(
        f"faster than the LibCST codemod CLI: {cli_seconds / fast_seconds:.0f}x wall, "
        f"{cli_cpu / cpu_median:.0f}x CPU (target >= 200x)"
    )
    print(
        f"targets: wall <= 2 s: {fast_seconds <= 2.0}; CPU <= 0.8 s: {cpu_median <= 0.8} "
        f"(median {cpu_median:.2f}s); "
        f"peak RSS <= 150 MB: {max(fast.max_process_kb, fast.tree_peak_kb) <= 150 * 1024}"
    )
    if not args.skip_large_file:
        large_file(args.repeat)
    if args.crossover:
        crossover(source_tree)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
