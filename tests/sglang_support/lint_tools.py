"""SGLang's own lint tools, at the versions its pre-commit configuration pins, run over a
release laid out as a checkout.

``tools_dir()`` is ``$AUXCAP_CACHE/venvs/lint-tools/bin`` with isort, black and codespell
(``TOOLS``), installed once into a venv of their own (they need no torch; the project's
constraints are passed all the same).  ``lay_out_checkout(release, dest)`` makes ``dest``
an SGLang checkout of the unpacked release: ``python/sglang`` (hard links),
``test/registered/unit/models/`` and an ``.isort.cfg`` with the settings SGLang's checkout
carries (``profile=black``, ``known_first_party=sglang``).  ``findings(root, paths)``
says, per path, how many lines isort and black would change (a moved blank line counts)
and how many misspellings codespell reports, each tool run once over all paths (black with
``--fast``: the same output without its check that the reformatted code parses to the same
tree, which reports nothing here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sglang_support import env

TOOLS = ("isort==5.13.2", "black==24.10.0", "codespell==2.4.1")
#: The words SGLang's codespell hook accepts (its ``-L`` list).
CODESPELL_IGNORE = "cann,thi,makro,wil,rouge,PRIS"
ISORT_CFG = "[settings]\nprofile=black\nknown_first_party=sglang\n"
KINDS = ("isort", "black", "codespell")


def tools_dir(timeout: float = 600.0) -> Path:
    """The ``bin`` folder of the cached tool venv (made once)."""
    venv = env.cache_root() / "venvs" / "lint-tools"
    marker = venv / ".ready"
    wanted = " ".join(TOOLS)
    if marker.is_file() and marker.read_text() == wanted:
        return venv / "bin"
    with env._locked(env.cache_root() / ".lint-tools.lock"):
        if marker.is_file() and marker.read_text() == wanted:
            return venv / "bin"
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)],
            check=True,
            timeout=120,
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "--disable-pip-version-check",
                "-q",
                "-c",
                str(env.PROJECT_ROOT / "scripts" / "constraints.txt"),
                *TOOLS,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise env.SGLangUnavailable(f"installing {wanted} failed: {proc.stderr[-2000:]}")
        marker.write_text(wanted)
    return venv / "bin"


def lay_out_checkout(release: Path, dest: Path) -> Path:
    """``dest`` as an SGLang checkout of the unpacked ``release`` (see module docstring)."""
    (dest / "python").mkdir(parents=True)
    shutil.copytree(release / "sglang", dest / "python" / "sglang", copy_function=os.link)
    (dest / "test" / "registered" / "unit" / "models").mkdir(parents=True)
    (dest / ".isort.cfg").write_text(ISORT_CFG)
    return dest


def write_file(root: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``root/rel`` without writing through a hard link."""
    path = root.joinpath(*rel.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)


def _diff_counts(output: str, root: Path) -> dict[str, int]:
    """Changed lines per file of a unified diff over several files."""
    counts: dict[str, int] = {}
    current = None
    for line in output.splitlines():
        if line.startswith("+++ "):
            continue
        if line.startswith("--- "):
            name = line[4:].split("\t")[0].rsplit(":before", 1)[0].strip()
            current = Path(name).resolve().relative_to(root.resolve()).as_posix()
            counts.setdefault(current, 0)
        elif current is not None and line[:1] in "+-":
            counts[current] += 1
    return counts


def _run(args: Sequence[str], root: Path) -> str:
    proc = subprocess.run(
        list(args), cwd=root, capture_output=True, text=True, timeout=600, check=False
    )
    return proc.stdout


def findings(root: Path, paths: Sequence[str]) -> dict[str, dict[str, int]]:
    """``path -> {tool: count}`` for the POSIX ``paths`` relative to the checkout ``root``."""
    tools = tools_dir()
    files = [str(root.joinpath(*p.split("/"))) for p in paths]
    isort = _diff_counts(_run([str(tools / "isort"), "--diff", "--check-only", *files], root), root)
    black = _diff_counts(_run([str(tools / "black"), "--diff", "-q", "--fast", *files], root), root)
    spelled = _run([str(tools / "codespell"), "-L", CODESPELL_IGNORE, *files], root)
    misspelt: dict[str, int] = {}
    for line in spelled.splitlines():
        name = line.split(":", 1)[0]
        rel = Path(name).resolve().relative_to(root.resolve()).as_posix()
        misspelt[rel] = misspelt.get(rel, 0) + 1
    return {
        p: {"isort": isort.get(p, 0), "black": black.get(p, 0), "codespell": misspelt.get(p, 0)}
        for p in paths
    }
