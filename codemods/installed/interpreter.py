"""Ask an interpreter which sglang it imports, and tell a Python from any other program.

``probe(python)`` runs ``PYTHON -c PROBE`` with its output read up to ``OUTPUT_LIMIT`` bytes
and a ``TIMEOUT`` in seconds: a program that is not a Python interpreter (``/bin/ls``,
``/usr/bin/yes``, a program that never exits) is named in one sentence, never with what it
printed (which may be auxcap's own probe echoed back, or endless output).  A Python
interpreter that fails is named with the last line of its traceback.
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass

from codemods.installed.errors import InstalledError

#: The most bytes read from each of the program's stdout and stderr; a program that writes
#: more is stopped (the probe's answer is one short line).
OUTPUT_LIMIT = 1 << 20
#: Seconds the program gets to answer.
TIMEOUT = 60.0

#: The key that marks the probe's answer (a program echoing its arguments cannot give it).
ANSWER_KEY = "auxcap_probe"

PROBE = r"""
import importlib.util, json, sys
out = {"auxcap_probe": 1, "executable": sys.executable, "python": sys.version.split()[0]}
spec = importlib.util.find_spec("sglang")
out["origin"] = None if spec is None else spec.origin
out["locations"] = None if spec is None else list(spec.submodule_search_locations or [])
try:
    import importlib.metadata as md
    dist = md.distribution("sglang")
    out["dist_version"] = dist.version
    out["dist_info"] = str(getattr(dist, "_path", "") or "") or None
    out["dist_base"] = str(dist.locate_file(""))
    out["direct_url"] = dist.read_text("direct_url.json")
except Exception:
    out["dist_version"] = out["dist_info"] = out["dist_base"] = out["direct_url"] = None
print(json.dumps(out))
"""

_PYTHON_FAILURE_MARKS = (b"Traceback (most recent call last):", b"Fatal Python error")


@dataclass(frozen=True)
class Run:
    """What a program did: its exit code (None when it was stopped), its output (each at
    most ``OUTPUT_LIMIT`` bytes), and whether it was stopped for writing too much or for
    taking too long."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    too_much: bool
    too_long: bool


def run_bounded(argv: list[str], timeout: float, limit: int) -> Run:
    """Run ``argv`` with no stdin; stop it after ``timeout`` seconds or once either stream
    passes ``limit`` bytes.  ``OSError`` when it cannot start."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    chunks: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    overflow = threading.Event()

    def drain(name: str, stream) -> None:
        kept = chunks[name]
        while True:
            block = stream.read1(65536)
            if not block:
                return
            kept += block[: max(0, limit - len(kept))]
            if len(kept) >= limit:
                overflow.set()
                proc.kill()
                return

    readers = [
        threading.Thread(target=drain, args=(name, stream), daemon=True)
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    too_long = False
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        too_long = True
        proc.kill()
        proc.wait()
    for reader in readers:
        # A child the program left behind may hold the pipes open: do not wait for it.
        reader.join(5)
    for stream in (proc.stdout, proc.stderr):
        assert stream is not None
        stream.close()
    too_much = overflow.is_set()
    return Run(
        returncode=None if too_much or too_long else proc.returncode,
        stdout=bytes(chunks["stdout"]),
        stderr=bytes(chunks["stderr"]),
        too_much=too_much,
        too_long=too_long,
    )


def _answer(stdout: bytes) -> dict | None:
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        facts = json.loads(lines[-1])
    except (ValueError, IndexError):
        return None
    needed = {ANSWER_KEY, "executable", "python", "origin"}
    return facts if isinstance(facts, dict) and needed <= set(facts) else None


def _not_python(python: str, what: str) -> InstalledError:
    return InstalledError(
        f"{python} is not a Python interpreter (asked to run a short Python program, it "
        f"{what}); name a Python interpreter with --python"
    )


def probe(python: str, timeout: float | None = None) -> dict:
    """What ``python`` says about sglang (see ``PROBE``); ``InstalledError`` naming
    ``python`` when it cannot run, is not a Python interpreter or fails."""
    seconds = TIMEOUT if timeout is None else timeout
    try:
        run = run_bounded([python, "-c", PROBE], seconds, OUTPUT_LIMIT)
    except OSError as err:
        raise InstalledError(f"{python}: cannot run this interpreter: {err}") from err
    if run.too_long:
        raise _not_python(python, f"gave no answer within {seconds:g} seconds")
    if run.too_much:
        raise _not_python(python, f"wrote more than {OUTPUT_LIMIT} bytes without answering")
    facts = _answer(run.stdout) if run.returncode == 0 else None
    if facts is not None:
        return facts
    if any(mark in run.stderr for mark in _PYTHON_FAILURE_MARKS):
        last = run.stderr.decode("utf-8", "replace").strip().splitlines()[-1]
        raise InstalledError(
            f"{python}: the Python interpreter failed (exit {run.returncode}): {last[:300]}"
        )
    raise _not_python(python, f"exited {run.returncode} without the answer")
