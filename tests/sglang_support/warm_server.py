"""A Python that has imported SGLang's third-party packages once and forks for every run.

Started by :mod:`sglang_support.warm` as ``python warm_server.py SOCKET PARENT_PID`` with the
environment of the runs it serves (the transformers a release pins, the CPU stand-ins).  It
imports :data:`PRELOAD` (torch, transformers, sympy, ...: about three quarters of the time
an SGLang model file takes to import on CPU), checks that it still runs one thread (a fork
of a process with more threads could inherit a held lock), prints ``ready`` and serves
requests on the Unix socket ``SOCKET``.

One request is one JSON line ``{"args": [...], "env": {...}, "cwd": ..., "stdout": FILE,
"stderr": FILE}``.  A handler (forked) forks the run: a new session, standard output and
error written to the two files, standard input ``/dev/null``, the request's environment,
working directory and ``sys.path`` (its ``PYTHONPATH`` first, as a fresh interpreter
builds it), then ``-m MODULE``, ``-c CODE`` or ``SCRIPT`` with its arguments, as ``python``
would run them.  Where a preloaded package would come from another file under the run's
``sys.path`` (another transformers), the run ``exec``\\s a fresh interpreter instead, with
the same arguments and files: never a wrong module.  The handler answers the run's process
id, then its exit code (negative: killed by that signal), a line each.

The server exits with the test process that started it (``PR_SET_PDEATHSIG``, and a check
of the parent's id every few seconds).
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import importlib.machinery
import json
import os
import runpy
import signal
import socket
import sys
import sysconfig
import traceback
import types

#: What an SGLang model file imports outside SGLang that costs the most on CPU, in import
#: order; a name that does not import here is left to the runs.
PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.distributed.tensor",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "sympy",
    "networkx",
    "transformers",
    "transformers.activations",
    "transformers.modeling_utils",
    "transformers.modeling_gguf_pytorch_utils",
    "huggingface_hub",
    "tokenizers",
    "safetensors",
    "pydantic",
    "aiohttp",
    "requests",
    "httpx",
    "rich",
    "yaml",
    "jinja2",
    "PIL",
    "zmq",
    "psutil",
    "gguf",
    "compressed_tensors",
)
_PR_SET_PDEATHSIG = 1


def _preload() -> list[str]:
    loaded = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a package the runs do not have
            continue
        loaded.append(name)
    return loaded


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _origin(name: str, path: list[str]) -> str | None:
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    return None if spec is None else spec.origin


def _same_packages(roots: set[str], path: list[str]) -> bool:
    """Whether every preloaded top-level package is the one ``path`` would import."""
    for name in roots:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None) != _origin(name, path):
            return False
    return True


def _third_party(loaded: list[str]) -> set[str]:
    """The top-level names of every module imported so far from outside the standard
    library: the preload and what it pulled in (the CPU stand-ins among them)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    names = {name.split(".")[0] for name in loaded}
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if (
            origin
            and "." not in name
            and not name.startswith("__")
            and not origin.startswith(stdlib)
        ):
            names.add(name)
    return names


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(request: dict, base_path: list[str], roots: set[str]) -> None:
    """The run of one request, in its own process; never returns."""
    os.setsid()
    for fd, name, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_TRUNC),
    ):
        opened = os.open(name, flags)
        os.dup2(opened, fd)
        os.close(opened)
    args = list(request["args"])
    env = request["env"]
    os.chdir(request["cwd"])
    # multiprocessing notes the directory it was imported in and starts spawned children
    # there; a fresh interpreter would have imported it here.
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.ORIGINAL_DIR = os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    if args[0] == "-m":
        first = os.getcwd()
    elif args[0] == "-c":
        first = ""
    else:
        first = os.path.dirname(os.path.abspath(args[0]))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *base_path]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    if not _same_packages(roots, sys.path):
        os.execve(sys.executable, [sys.executable, *args], env)
    code = 0
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args[0] == "-c":
            sys.argv = ["-c", *args[2:]]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(args[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = args
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - reported as the interpreter would
        # From the run's own frames on: this function's frame is not the program's.
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - nothing left to report to
                pass
        os._exit(code)


def _handle(conn: socket.socket, base_path: list[str], roots: set[str]) -> None:
    """Fork the run of the request on ``conn``, answer its pid and exit code; never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    reader = conn.makefile("rb")
    request = json.loads(reader.readline())
    pid = os.fork()
    if pid == 0:
        reader.close()
        conn.close()
        _run(request, base_path, roots)
    conn.sendall(f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


def main(socket_path: str, parent: int) -> int:
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    own = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if p not in own]
    loaded = _preload()
    if _threads() != 1:
        print(f"not ready: {_threads()} threads after the preload", flush=True)
        return 1
    roots = _third_party(loaded)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(64)
    server.settimeout(5.0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    while os.getppid() == parent:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            _handle(conn, base_path, roots)
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
