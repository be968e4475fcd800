"""Command run under ``family_check.shipped_test_env(tree)``: the shipped family test of a
tree, for several PP sizes in one process.

    python -m sglang_support.family_runner [--server-defaults] [--layer-ids 1,3,4,6;0,1,2]
        [--batches 3,0,2] TEST_FILE PP[,PP...] [MODEL ...]
    python -m sglang_support.family_runner --probe TEST_FILE

Loads ``TEST_FILE`` (the generated ``test_pp_aux_capture_family.py``) as a module, which
stands in for the GPU-only packages and imports SGLang once, imports the model modules of
the chosen cases, then calls the test's own ``run_family(pp, family_jobs(cases))`` for
each PP size (with ``--layer-ids``: ``family_jobs(cases, layer_id_sets)``; with
``--batches``: ``run_family(pp, jobs, batches)``; otherwise the test's defaults) with forked workers instead of the test's fork server (each stage starts from this
process's imports instead of importing SGLang again).  Prints one JSON line:
``{"PP": [records of the last rank], ...}``, the records of the test's ``--json`` mode.

``--probe TEST_FILE`` says instead how the test builds each of its stages: SGLang's
parallel state set up for one stage with the test utilities' ``init_parallel``, every case
of ``FAMILY`` built twice with ``build_model``; one JSON line ``{model: {"constructed",
"widths", "hidden_size", "logits_module", "same_weights"}}``.

``--server-defaults``, for releases whose model code reads what a server sets before any
model runs (0.5.14's ``qwen2_moe`` asks ``get_global_server_args()`` in ``forward``): the
global server arguments are ``ServerArgs``' field defaults (set without running its
``__post_init__``, which would look for a model), and ``cached_triton_kernel`` hands the
kernel back undecorated, as releases from 0.5.10 on do off CUDA (0.5.3 wraps every LoRA
kernel at import, asserting a real triton ``JITFunction``), and the modules in
``WITH_FALLBACK`` do not import, so the release's own CPU fallback is used.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import multiprocessing
import os
import sys


def load_test(path: str):
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: Modules of the stood-in GPU-only packages for which these releases keep a fallback of
#: their own, used when the import fails, as on a CPU machine (0.5.10 builds a table of
#: ``ActivationType`` members at import: the stand-in's empty class has none).
WITH_FALLBACK = ("flashinfer.fused_moe.core",)


def _undecorated(key_fn=None):
    return lambda fn: fn


def kernel_cache_off() -> None:
    """``cached_triton_kernel`` as releases from 0.5.10 on have it off CUDA (see above),
    before any module that uses it is imported."""
    common = importlib.import_module("sglang.srt.utils.common")
    if hasattr(common, "cached_triton_kernel"):
        common.cached_triton_kernel = _undecorated
        utils = importlib.import_module("sglang.srt.utils")
        if hasattr(utils, "cached_triton_kernel"):
            utils.cached_triton_kernel = _undecorated


def default_server_args() -> None:
    """The global server arguments, every field at its default (see above)."""
    server_args = importlib.import_module("sglang.srt.server_args")
    setter = getattr(server_args, "set_global_server_args_for_scheduler", None)
    if setter is None:
        return
    cls = server_args.ServerArgs
    args = object.__new__(cls)
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            setattr(args, field.name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(args, field.name, field.default_factory())
        else:
            setattr(args, field.name, None)
    setter(args)


def _probe(utils, case) -> dict:
    import torch
    from torch import nn

    first = utils.build_model(case, 0, 1, None)
    second = utils.build_model(case, 0, 1, None)
    stand_ins = [m for m in first.modules() if isinstance(m, utils.StandInLayer)]
    text = getattr(first.config, "text_config", None) or first.config
    a, b = first.state_dict(), second.state_dict()
    return {
        # Modules only the model's constructor builds (the assembled stand-in has none).
        "constructed": any(
            type(m).__module__.startswith("sglang.srt.layers.") for m in first.modules()
        ),
        "widths": sorted({int(layer.weight.shape[0]) for layer in stand_ins}),
        "hidden_size": int(text.hidden_size),
        "logits_module": isinstance(first.logits_processor, nn.Module),
        "same_weights": a.keys() == b.keys()
        and all(not a[k].is_floating_point() or torch.equal(a[k], b[k]) for k in a),
    }


def probe(path: str) -> dict:
    from codemods.ppcheck.runner import free_port

    test = load_test(path)
    from sglang.test import pp_aux_capture_family_models as utils

    utils.init_parallel(0, 1, free_port())
    out = {}
    for case in test.FAMILY:
        try:
            out[case[0]] = _probe(utils, case)
        except Exception as error:  # reported per model
            out[case[0]] = {"error": f"{type(error).__name__}: {error}"}
    return out


def _ints(text: str) -> list[int]:
    return [int(i) for i in text.split(",") if i.strip()]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--probe"]:
        out = probe(argv[1])
        sys.stdout.flush()
        print(json.dumps(out))
        return 0
    defaults = argv[:1] == ["--server-defaults"]
    argv = argv[1:] if defaults else argv
    options: dict[str, str] = {}
    while argv[:1] in (["--layer-ids"], ["--batches"]):
        options[argv[0]] = argv[1]
        argv = argv[2:]
    path, sizes, *models = argv
    if defaults:
        # The shipped stand-ins for GPU-only packages first, as the test itself does.
        utils = importlib.import_module("sglang.test.pp_aux_capture_family_models")
        utils.stub_gpu_only_packages()
        for name in WITH_FALLBACK:
            sys.modules[name] = None  # type: ignore[assignment]
        kernel_cache_off()
    test = load_test(path)
    if defaults:
        default_server_args()
    chosen = [case for case in test.FAMILY if not models or case[0] in models]
    for case in chosen:
        try:  # an import error shows again, per case, in the stage that builds it
            importlib.import_module(f"sglang.srt.models.{case[0]}")
        except Exception:
            pass
    test.stage_processes = lambda *_modules: multiprocessing.get_context("fork")
    if "--layer-ids" in options:
        id_sets = [_ints(part) for part in options["--layer-ids"].split(";")]
        jobs = test.family_jobs(chosen, id_sets)
    else:
        jobs = test.family_jobs(chosen)
    run = test.run_family
    if "--batches" in options:
        batches = _ints(options["--batches"])
        out = {int(size): run(int(size), jobs, batches) for size in sizes.split(",")}
    else:
        out = {int(size): run(int(size), jobs) for size in sizes.split(",")}
    sys.stdout.flush()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
