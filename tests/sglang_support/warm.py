"""``subprocess.run([python, ...])`` for SGLang checks, started warm.

An SGLang model file takes about 9 s to import on one CPU core, three quarters of it in
torch, transformers and the other packages it imports, which are the same for every tree
that shares a transformers release.  :func:`run` hands the command to a server
(``warm_server.py``) that has imported them once for that set of packages and forks a
fresh run for each command, so a check pays only for SGLang's own modules.  The run is a
new process with the command's environment, working directory, arguments, ``sys.path``
and files, and it is answered as ``subprocess.run(..., capture_output=True, text=True,
timeout=...)`` answers: a ``CompletedProcess``, or ``TimeoutExpired`` after its process
group is killed.

One server per test process and set of packages (the ``PYTHONPATH`` entries that hold no
SGLang tree and the environment variables torch and transformers read at import); it
exits with the test process.  Where no server can start, or the command is not ``-m``,
``-c`` or a script, the command runs cold, as before.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

SERVER = Path(__file__).with_name("warm_server.py")
#: Environment variables the preloaded packages read when they are imported.
IMPORT_TIME_ENV = ("HF_", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "CUDA_", "TOKENIZERS")
_START_TIMEOUT = 300.0

_servers: dict[tuple, tuple[subprocess.Popen, str] | None] = {}


def _key(env: Mapping[str, str]) -> tuple:
    paths = tuple(
        p
        for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if p and not (Path(p) / "sglang").is_dir()
    )
    settings = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_ENV)))
    return paths, settings


def _start(key: tuple, env: Mapping[str, str]) -> tuple[subprocess.Popen, str] | None:
    folder = tempfile.mkdtemp(prefix="auxcap-warm-")
    path = os.path.join(folder, "socket")
    server_env = dict(env)
    server_env["PYTHONPATH"] = os.pathsep.join(key[0])
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), path, str(os.getpid())],
        env=server_env,
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    # The server prints one line once it listens (or why it will not); it is killed if
    # the preload hangs.
    timer = _Timer(proc, _START_TIMEOUT)
    line = proc.stdout.readline().decode(errors="replace").strip()
    timer.cancel()
    if line != "ready":
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
        return None
    atexit.register(_stop, proc, folder)
    return proc, path


class _Timer:
    def __init__(self, proc: subprocess.Popen, seconds: float) -> None:
        import threading

        self._timer = threading.Timer(seconds, proc.kill)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()


def _stop(proc: subprocess.Popen, folder: str) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(folder, ignore_errors=True)


def _server(env: Mapping[str, str]) -> str | None:
    key = _key(env)
    if key not in _servers:
        _servers[key] = _start(key, env)
    found = _servers[key]
    if found is None:
        return None
    proc, path = found
    if proc.poll() is not None:
        _servers[key] = found = _start(key, env)
        if found is None:
            return None
        path = found[1]
    return path


def _warm_form(args: Sequence[str]) -> bool:
    if not args:
        return False
    if args[0] in ("-m", "-c"):
        return len(args) >= 2
    return not args[0].startswith("-") and args[0].endswith(".py")


def _read(path: Path) -> str:
    with open(path, encoding=None, errors="strict", newline=None) as handle:
        return handle.read()


def run(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True,
    text=True, timeout=timeout)``, run by a warm server where one serves ``env``."""
    command = [sys.executable, *args]
    path = _server(env) if _warm_form(args) else None
    if path is None:
        return subprocess.run(
            command,
            env=dict(env),
            cwd=str(cwd),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    with tempfile.TemporaryDirectory(prefix="auxcap-run-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        out.touch()
        err.touch()
        request = {
            "args": list(args),
            "env": dict(env),
            "cwd": str(Path(cwd).resolve()),
            "stdout": str(out),
            "stderr": str(err),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            conn.settimeout(timeout)
            reader = conn.makefile("rb")
            pid = int(reader.readline())
            try:
                answer = reader.readline()
            except TimeoutError:
                _kill_group(pid)
                raise subprocess.TimeoutExpired(
                    command, timeout, output=_read(out), stderr=_read(err)
                ) from None
            if not answer:
                raise RuntimeError(f"the warm server for {command[1:3]} closed the connection")
            return subprocess.CompletedProcess(command, int(answer), _read(out), _read(err))


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
