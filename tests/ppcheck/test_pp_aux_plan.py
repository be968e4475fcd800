"""``pp_aux_plan.py`` (torch-free) and validate-pp's transport hold the same arithmetic."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from codemods.ppcheck.runner import free_port
from tests.test_installs import PROJECT_ROOT, hide_modules

PPCHECK = PROJECT_ROOT / "codemods" / "ppcheck"


def _definitions(path: Path) -> dict[str, str]:
    """Top-level functions, classes and assignments of a module: name -> AST dump."""
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.dump(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                found[target.id] = ast.dump(node)
    return found


def test_the_transport_imports_the_plan_instead_of_copying_it():
    plan = _definitions(PPCHECK / "pp_aux_plan.py")
    transport = _definitions(PPCHECK / "pp_aux_transport.py")
    assert {"AuxCapturePlan", "validate_layer_ids", "partition_from_string"} <= set(plan)
    copied = sorted(set(plan) & set(transport))
    assert not copied, f"pp_aux_transport.py defines again {copied}"
    from codemods.ppcheck import pp_aux_plan, pp_aux_transport

    for name in ("AuxCapturePlan", "validate_layer_ids", "AUX_ENTRY", "MODES"):
        assert getattr(pp_aux_transport, name) is getattr(pp_aux_plan, name)


def test_the_transport_imports_the_plan_from_its_own_directory():
    tree = ast.parse((PPCHECK / "pp_aux_transport.py").read_text(encoding="utf-8"))
    sources = [(n.module, n.level) for n in tree.body if isinstance(n, ast.ImportFrom)]
    assert ("pp_aux_plan", 1) in sources
    assert not [m for m, _ in sources if m and m.startswith("codemods")]


def test_the_upstream_generator_imports_without_torch(tmp_path):
    hidden = hide_modules(tmp_path / "hidden", "torch", "numpy")
    code = (
        "import codemods.upstream.output.pr_body, codemods.upstream.output.series\n"
        "import sys\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(PROJECT_ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"


GATHER_SCRIPT = """
import os, sys
import torch.distributed as dist
import torch.multiprocessing as mp
from codemods.ppcheck.pp_aux_transport import all_gather_objects

def worker(rank, size, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)
    group = dist.new_group(list(range(size)), backend="gloo")
    payload = {"rank": rank, "blob": "x" * (1000 * rank), "ids": list(range(rank))}
    gathered = all_gather_objects(payload, group)
    expected = [{"rank": r, "blob": "x" * (1000 * r), "ids": list(range(r))}
                for r in range(size)]
    with open(os.path.join(out, f"rank{rank}"), "w") as handle:
        handle.write("ok" if gathered == expected else repr(gathered)[:300])
    dist.barrier(group=group)
    os._exit(0)

if __name__ == "__main__":
    size, port, out = 3, int(sys.argv[1]), sys.argv[2]
    mp.start_processes(worker, args=(size, port, out), nprocs=size, start_method="spawn")
"""


def test_all_gather_objects_gathers_payloads_of_different_sizes_without_numpy(tmp_path):
    """The handshake's gather: three ranks, payloads of 0.1 to 2 KB, numpy not installed."""
    hidden = hide_modules(tmp_path / "hidden", "numpy")
    script = tmp_path / "gather.py"
    script.write_text(GATHER_SCRIPT)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(PROJECT_ROOT)])}
    done = subprocess.run(
        [sys.executable, str(script), str(port), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [(tmp_path / f"rank{r}").read_text() for r in range(3)] == ["ok"] * 3
