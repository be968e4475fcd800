"""Time what the patched server-argument validation adds to a launch with EAGLE3 under PP:
the model lookup before (the model loader's ``get_model_architecture``, which imports the
model registry and with it every model) and now (the served architecture's own module,
through the table the patch writes), side by side.

    python scripts/bench_validation_import.py [VERSION] [--rounds N] [--arch ARCH]

VERSION defaults to 0.5.23 (a release with ``check_pipeline_parallel_compat``, 0.5.21+);
ARCH to ``LlamaForCausalLM``.  The whole patch is applied to a copy of the unpacked release
(as the tests do), then each round starts two fresh interpreters (no warm start) in the
release's test set-up (``sglang_support.env.sglang_env``: its transformers, the stand-ins
for GPU-only packages, CPU only), each importing first, untimed, ``validation_hook`` and
what every launch has imported by the time ``check_server_args`` runs
(``attention_hook``, which builds the model config through ``model_config_of`` for any
model, and with it ``sglang.srt.configs.model_config``):

* ``before``: the lookup the previous patch made, ``get_model_architecture(model_config_of
  (cfg))`` and ``relays_pp_aux_capture`` (what its ``_pp_aux_capture_supported`` ran);
* ``after``: ``check_pipeline_parallel_compat`` itself, with EAGLE3 on 2 PP stages on PD
  prefill (server arguments from the shipped tests' ``pp_server_args``).

Prints the median seconds of each and how many ``sglang.srt.models`` modules each imported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sglang_support.env import sglang_env, sglang_tree  # noqa: E402
from sglang_support.family_check import patched_copy  # noqa: E402

CHILD = """
import json, sys, time
# What every launch has imported before check_server_args: the attention hook builds the
# model config (model_config_of) for any model.
import sglang.srt.arg_groups.attention_hook
import sglang.srt.arg_groups.model_override_base
from sglang.srt.arg_groups import validation_hook
from sglang.srt.arg_groups.overrides import resolving_view
from sglang.test.pp_aux_capture_family_models import pp_server_args

mode, arch = sys.argv[1], sys.argv[2]
view = resolving_view(pp_server_args(arch))
before = set(sys.modules)
start = time.perf_counter()
if mode == "before":
    from sglang.srt.arg_groups.model_override_base import model_config_of
    from sglang.srt.layers.aux_hidden_states import relays_pp_aux_capture
    from sglang.srt.model_loader.utils import get_model_architecture

    model_cls, _ = get_model_architecture(model_config_of(view))
    assert relays_pp_aux_capture(model_cls, "EAGLE3")
else:
    validation_hook.check_pipeline_parallel_compat(view)
seconds = time.perf_counter() - start
models = [m for m in set(sys.modules) - before if m.startswith("sglang.srt.models.")]
print(json.dumps({"seconds": seconds, "models": len(models)}))
"""


def run(copy: Path, mode: str, arch: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, arch],
        env=sglang_env(copy),
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", nargs="?", default="0.5.23")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arch", default="LlamaForCausalLM")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-validation-") as scratch:
        _result, copy = patched_copy(sglang_tree(args.version), Path(scratch) / "patched")
        found: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for mode in found:
                found[mode].append(run(copy, mode, args.arch))
    print(f"SGLang {args.version}, {args.arch}, EAGLE3 with --pp-size 2, {args.rounds} rounds:")
    for mode, runs in found.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        models = max(r["models"] for r in runs)
        each = ", ".join(f"{r['seconds']:.2f}" for r in runs)
        print(f"  {mode:6} {seconds:6.2f} s median ({each}); model modules imported: {models}")


if __name__ == "__main__":
    main()
