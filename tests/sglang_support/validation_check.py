"""Run the real server-arg validation of an SGLang tree on PP + speculative configurations.

Usage: ``python -m sglang_support.validation_check`` under ``env.sglang_env(tree)``.
Prints one JSON object: case name -> ``"accepted"`` or ``"refused: <message>"``.

Each case is a server-args record (a namespace, as SGLang's own fixtures use), built by
the shipped tests' ``pp_server_args`` (``sglang_support.shipped_utils``: loaded from the text the
patch ships, so unpatched releases are checked alike), with the model configuration supplied the way ``model_config_of`` accepts a fixture's (an
``_model_config`` without a build key, with the fields ``get_model_architecture`` reads:
``--model-impl`` among them), so the check resolves the model class without loading a
checkpoint.  ``check_pipeline_parallel_compat`` (0.5.21+) is called as
``check_server_args`` calls it, with a resolving view; ``handle_aux_hidden_state_capture``
(0.5.23+) with the record.  ``--aux JSON`` (case name -> fields) runs only the latter on
those cases and prints, per case, its outcome and whether the served class relays the
case's method (``aux_cases``); ``--pp JSON`` runs only the former, each case in turn, and
prints its outcome and which model modules the check imported (``pp_cases``).
``--verdicts JSON`` (``{"archs": [...] or null for every registered one, "methods":
[...]}``) asks, per architecture and capture method, both the patched hook's check and
the runtime guard where the runner configures the capture under PP (``verdicts``).

The model classes themselves: ``--relays STEM,STEM,...`` (a patched tree) asks the shipped
``relays_pp_aux_capture`` about each class of the ``EntryClass`` of each
``sglang.srt.models.<stem>`` (``relays``); ``--refusals JSON`` calls a real capture hook
on a bare causal-LM instance under PP groups of the given sizes (``refusals``).
``--stacks JSON`` (case name -> class, the classes its ``__init__`` builds, method) runs
SGLang's ``configure_aux_hidden_state_capture`` with the real hooks under PP on such an
instance and prints whether the runtime guard admits it (``stack_cases``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from types import SimpleNamespace

from sglang.srt.arg_groups import validation_hook
from sglang.srt.arg_groups.overrides import resolving_view
from torch import nn

from codemods.catalog.methods import RELAYED
from sglang_support.shipped_utils import shipped_test_utils
from sglang_support.stages import HOOKS, FakePPGroup, bare

PATCHED_ARCH = "LlamaForCausalLM"
#: A target whose model file the patch does not touch.
OTHER_ARCH = "KimiLinearForCausalLM"
#: A subclass of the patched class in a file the patch does not touch (``mistral.py``): it
#: keeps the patched class's stack and hooks, so the declaration covers it.
SUBCLASS_ARCH = "MistralForCausalLM"
#: A subclass of the patched class that builds its own decoder stack (``llama4.py``): the
#: declaration does not cover it.
OWN_STACK_ARCH = "Llama4ForCausalLM"
#: What a case does not set: no speculative algorithm, no disaggregation.
DEFAULTS = dict(speculative_algorithm=None, disaggregation_mode="null")


def server_args(arch: str = PATCHED_ARCH, model_impl: str = "auto", **fields) -> SimpleNamespace:
    """The record of a case, built by the shipped tests' own builder (``pp_server_args``)."""
    return shipped_test_utils().pp_server_args(arch, model_impl, **{**DEFAULTS, **fields})


def _outcome(call, record, pp_spec: bool) -> str:
    previous = os.environ.pop("SGLANG_ENABLE_PP_SPEC", None)
    if pp_spec:
        os.environ["SGLANG_ENABLE_PP_SPEC"] = "1"
    try:
        call(record)
    except (AssertionError, ValueError) as exc:
        return f"refused: {exc}"
    finally:
        os.environ.pop("SGLANG_ENABLE_PP_SPEC", None)
        if previous is not None:
            os.environ["SGLANG_ENABLE_PP_SPEC"] = previous
    return "accepted"


def _pp_compat(record) -> None:
    validation_hook.check_pipeline_parallel_compat(resolving_view(record))


#: name -> (server-args fields, SGLANG_ENABLE_PP_SPEC)
PP_CASES = {
    "eagle_pp_spec": (dict(speculative_algorithm="EAGLE"), True),
    "eagle_prefill": (dict(speculative_algorithm="EAGLE", disaggregation_mode="prefill"), False),
    "eagle3_pp_spec": (dict(speculative_algorithm="EAGLE3"), True),
    "eagle3_prefill": (dict(speculative_algorithm="EAGLE3", disaggregation_mode="prefill"), False),
    "eagle3_subclass_pp_spec": (dict(speculative_algorithm="EAGLE3", arch=SUBCLASS_ARCH), True),
    "eagle3_subclass_prefill": (
        dict(speculative_algorithm="EAGLE3", arch=SUBCLASS_ARCH, disaggregation_mode="prefill"),
        False,
    ),
    # The refusals that stay.  DFLASH with PP among them on 0.5.21-0.5.23, whose
    # speculative_hook._handle_dflash refuses it, so the patch leaves it refused.
    "dflash_prefill": (dict(speculative_algorithm="DFLASH", disaggregation_mode="prefill"), False),
    "eagle3_other_model": (
        dict(speculative_algorithm="EAGLE3", arch=OTHER_ARCH, disaggregation_mode="prefill"),
        False,
    ),
    "dflash_other_model": (
        dict(speculative_algorithm="DFLASH", arch=OTHER_ARCH, disaggregation_mode="prefill"),
        False,
    ),
    "eagle3_aggregate_without_pp_spec": (dict(speculative_algorithm="EAGLE3"), False),
    "eagle3_multi_layer": (
        dict(
            speculative_algorithm="EAGLE3",
            enable_multi_layer_eagle=True,
            disaggregation_mode="prefill",
        ),
        False,
    ),
    "eagle3_pp_spec_adaptive": (
        dict(speculative_algorithm="EAGLE3", speculative_adaptive=True),
        True,
    ),
    "eagle3_pp_spec_prefill": (
        dict(speculative_algorithm="EAGLE3", disaggregation_mode="prefill"),
        True,
    ),
    "eagle3_overlap": (
        dict(
            speculative_algorithm="EAGLE3",
            disable_overlap_schedule=False,
            disaggregation_mode="prefill",
        ),
        False,
    ),
    "dflash_aggregate": (dict(speculative_algorithm="DFLASH"), False),
    "dflash_pp_spec": (dict(speculative_algorithm="DFLASH"), True),
    "dflash_pp_spec_prefill": (
        dict(speculative_algorithm="DFLASH", disaggregation_mode="prefill"),
        True,
    ),
    "ngram": (dict(speculative_algorithm="NGRAM", disaggregation_mode="prefill"), False),
    "eagle3_own_stack_subclass": (
        dict(speculative_algorithm="EAGLE3", arch=OWN_STACK_ARCH, disaggregation_mode="prefill"),
        False,
    ),
    "eagle3_transformers_impl": (
        dict(
            speculative_algorithm="EAGLE3", model_impl="transformers", disaggregation_mode="prefill"
        ),
        False,
    ),
    "min_free_slots_delay": (
        dict(speculative_algorithm="EAGLE3", min_free_slots_delay=5, disaggregation_mode="prefill"),
        False,
    ),
}

#: ``--enable-return-aux-hidden-states`` with PP (0.5.23+): refused for every model, the
#: ones that relay their captures to the last stage included.
AUX_CASES = {
    "aux_eagle3": dict(speculative_algorithm="EAGLE3"),
    "aux_dflash": dict(speculative_algorithm="DFLASH", return_aux_hidden_state_layer_ids=[1, 4]),
    "aux_eagle3_subclass": dict(speculative_algorithm="EAGLE3", arch=SUBCLASS_ARCH),
    "aux_eagle3_other_model": dict(speculative_algorithm="EAGLE3", arch=OTHER_ARCH),
    "aux_dspark_via_dflash": dict(
        speculative_algorithm="DSPARK", return_aux_hidden_state_layer_ids=[1, 4]
    ),
    # Checked after pp_size: without PP, so that the layer-ids refusal is reached.
    "aux_dflash_without_ids": dict(speculative_algorithm="DFLASH", pp_size=1),
    "aux_with_draft": dict(speculative_algorithm="EAGLE3", speculative_draft_model_path="/d"),
    "aux_ngram": dict(speculative_algorithm="NGRAM"),
    "aux_eagle3_own_stack_subclass": dict(speculative_algorithm="EAGLE3", arch=OWN_STACK_ARCH),
    "aux_eagle3_transformers_impl": dict(speculative_algorithm="EAGLE3", model_impl="transformers"),
}


def _pp_aux_check(record, method: str) -> str:
    """The patched hook's check on the served class of ``record`` for ``method`` under
    PP: ``admitted`` or ``refused: <message>``."""
    try:
        validation_hook._check_pp_aux_capture_supported(resolving_view(record), method)
    except ValueError as exc:
        return f"refused: {exc}"
    return "admitted"


def aux_cases(cases: dict[str, dict]) -> dict[str, dict[str, object]]:
    """``handle_aux_hidden_state_capture`` on each case (fields as in :data:`AUX_CASES`,
    ``arch`` and ``pp_size`` included): its outcome, and whether the patched hook's check
    says the served class relays the case's method (None on a tree without the check)."""
    results: dict[str, dict[str, object]] = {}
    for name, fields in cases.items():
        record = server_args(enable_return_aux_hidden_states=True, **fields)
        relays = None  # on a tree without the patched hook's check
        if hasattr(validation_hook, "_check_pp_aux_capture_supported"):
            relays = _pp_aux_check(record, record.speculative_algorithm.upper()) == "admitted"
        outcome = _outcome(validation_hook.handle_aux_hidden_state_capture, record, False)
        results[name] = {"outcome": outcome, "relays": relays}
    return results


def pp_cases(cases: dict[str, dict]) -> dict[str, dict[str, object]]:
    """``check_pipeline_parallel_compat`` on each case (server-args fields, ``arch`` and
    ``model_impl`` included): its outcome, and whether the check imported the model
    registry (which imports every model) or only the served model's module."""
    results: dict[str, dict[str, object]] = {}
    for name, fields in cases.items():
        record = server_args(**fields)
        before = set(sys.modules)
        outcome = _outcome(_pp_compat, record, False)
        models = sorted(m for m in set(sys.modules) - before if m.startswith("sglang.srt.models."))
        results[name] = {
            "outcome": outcome,
            "registry": "sglang.srt.models.registry" in models,
            "models": len(models),
        }
    return results


def _validation_verdict(arch: str, method: str) -> str:
    """The patched hook's check on ``arch`` served with ``method`` under 2 PP stages."""
    return _pp_aux_check(server_args(arch, speculative_algorithm=method), method)


def _runtime_verdict(arch: str, method: str) -> str:
    """The runner's ``configure_aux_hidden_state_capture`` under 2 PP stages on the class
    the loader resolves for ``arch``, built without ``__init__`` (only its class is asked)
    and with its capture hooks replaced by recorders where they are defined: ``admitted`` (a hook was called),
    ``refused: <message>`` (the guard's ``NotImplementedError``), ``no hook: <message>``
    (the runner's own refusal of a class without the method's hook), or ``not a module``
    for a class that is no ``nn.Module`` (it builds another class's module: no instance
    of it can be built without its checkpoint's config)."""
    from unittest import mock

    from sglang.srt.model_executor.model_runner_components import (
        attention_backend_setup as setup,
    )
    from sglang.srt.model_loader.utils import get_model_architecture

    model_cls, _ = get_model_architecture(server_args(arch)._model_config)
    if not issubclass(model_cls, nn.Module):
        # MiniCPMV: a dispatcher that builds the module of the checkpoint's version.
        return f"not a module: {model_cls.__name__} builds another class's module"
    model = bare(model_cls)
    hooks = [name for name in HOOKS.values() if hasattr(model_cls, name)]
    # Each recorder replaces the hook where it is defined, so the class keeps its own body.
    owners = {name: next(k for k in model_cls.__mro__ if name in vars(k)) for name in hooks}
    recorders = [mock.patch.object(owners[name], name) for name in hooks]
    called = []
    try:
        for recorder in recorders:
            called.append(recorder.start())
        setup.configure_aux_hidden_state_capture(
            model=model,
            eagle_use_aux_hidden_state=method == "EAGLE3",
            eagle_aux_hidden_state_layer_ids=[1],
            dflash_use_aux_hidden_state=method != "EAGLE3",
            dflash_target_layer_ids=[1],
            is_dspark=method == "DSPARK",
            pp_size=2,
        )
    except NotImplementedError as exc:
        return f"refused: {exc}"
    except ValueError as exc:
        return f"no hook: {exc}"
    finally:
        for recorder in recorders:
            recorder.stop()
    return "admitted" if any(hook.called for hook in called) else "not configured"


def verdicts(archs: list[str] | None, methods: list[str]) -> dict[str, dict[str, list[str]]]:
    """arch -> method -> [the validation's verdict, the runtime guard's verdict], over
    ``archs`` (None: every architecture the registry holds)."""
    if archs is None:
        from sglang.srt.models.registry import ModelRegistry

        archs = sorted(ModelRegistry.get_supported_archs())
    found: dict[str, dict[str, list[str]]] = {}
    for arch in archs:
        for method in methods:
            pair = []
            for verdict in (_validation_verdict, _runtime_verdict):
                try:
                    pair.append(verdict(arch, method))
                except Exception as exc:  # reported: the test names what could not be asked
                    pair.append(f"error: {type(exc).__name__}: {exc}")
            found.setdefault(arch, {})[method] = pair
    return found


def relays(stems: str) -> dict[str, list[str]]:
    """The ``__name__`` of each class of the ``EntryClass`` of each model file (stems
    comma-separated) -> the capture methods the shipped ``relays_pp_aux_capture`` says it
    relays, for the classes that relay any."""
    from sglang.srt.layers.aux_hidden_states import relays_pp_aux_capture

    found: dict[str, list[str]] = {}
    for stem in stems.split(","):
        entry = getattr(importlib.import_module(f"sglang.srt.models.{stem}"), "EntryClass", [])
        for cls in entry if isinstance(entry, (list, tuple)) else [entry]:
            methods = [m for m in sorted(RELAYED) if relays_pp_aux_capture(cls, m)]
            if methods:
                found[cls.__name__] = methods
    return found


def refusals(spec: dict) -> dict[str, dict[str, object]]:
    """The real hook ``spec["hook"]`` of ``spec["class"]`` (``sglang.srt.models.<model>``)
    called with ``spec["layer_ids"]`` on a bare instance, on the last rank of a stand-in PP
    group of each size in ``spec["pp"]``: per size, ``error`` (``"<type>: <message>"`` or
    None) and ``ids`` (what it stored on ``model.layers_to_capture``, None for nothing)."""
    module = importlib.import_module(f"sglang.srt.models.{spec['model']}")
    report = {}
    for size in spec["pp"]:
        group = FakePPGroup(size - 1, size)
        lm = bare(getattr(module, spec["class"]))
        lm.config = SimpleNamespace(num_hidden_layers=9, hidden_size=4)
        lm.pp_group = group
        lm.model = nn.Module()
        lm.model.pp_group = group
        lm.model.config = lm.config
        lm.capture_aux_hidden_states = False
        try:
            getattr(lm, spec["hook"])(list(spec["layer_ids"]))
        except Exception as error:  # the hook's own refusal is what is reported
            outcome = f"{type(error).__name__}: {error}"
        else:
            outcome = None
        ids = getattr(lm.model, "layers_to_capture", None)
        report[str(size)] = {"error": outcome, "ids": None if ids is None else list(ids)}
    return report


#: The number of layers and the hidden size of an assembled model (:func:`assembled`).
_LAYERS, _WIDTH = 8, 4


def _class(dotted: str) -> type:
    """``stem.Class`` -> the class ``Class`` of ``sglang.srt.models.<stem>``."""
    stem, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(f"sglang.srt.models.{stem}"), name)


def _set_layer_range(stack: nn.Module, start: int, end: int) -> None:
    """``start_layer``/``end_layer`` of ``stack``, under the names its class reads them."""
    for name, value in (("start_layer", start), ("end_layer", end)):
        read_only = isinstance(getattr(type(stack), name, None), property)
        object.__setattr__(stack, f"_{name}" if read_only else name, value)


def assembled(spec: dict, group) -> nn.Module:
    """A bare instance of ``spec["class"]`` (``stem.Class``) whose attributes at the dotted
    paths of ``spec["parts"]`` are bare instances of the classes named there (the classes
    its ``__init__`` builds there), outermost first; each with a tiny config, the PP
    group ``group`` and, where it is a decoder stack (``"layers"`` in ``spec["stacks"]``),
    layers and the stage's layer range."""
    config = SimpleNamespace(num_hidden_layers=_LAYERS, hidden_size=_WIDTH)
    config.text_config = config  # a multimodal hook reads the text model's config there
    per_stage = _LAYERS // group.world_size
    start = group.rank_in_group * per_stage

    def made(cls: type, stack: bool) -> nn.Module:
        module = bare(cls)
        module.config = config
        module.pp_group = group
        module.capture_aux_hidden_states = False
        module.layers_to_capture = []
        if stack:
            module.layers = nn.ModuleList(nn.Module() for _ in range(_LAYERS))
            _set_layer_range(module, start, start + per_stage)
        return module

    stacks = set(spec.get("stacks", ()))
    root = made(_class(spec["class"]), "" in stacks)
    for path, dotted in sorted(spec.get("parts", {}).items(), key=lambda kv: kv[0].count(".")):
        *outer, attr = path.split(".")
        holder = root
        for name in outer:
            holder = getattr(holder, name)
        setattr(holder, attr, made(_class(dotted), path in stacks))
    return root


def _publish_pp_group(group) -> None:
    """Make ``group`` the process's PP group where the release reads it from the runtime
    context (a hook that asks ``get_parallel().pp_group`` rather than its model)."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        return
    override = getattr(get_parallel(), "override_permanently", None)
    if override is not None:
        override(pp_group=group, pp_size=group.world_size, pp_rank=group.rank_in_group)


def stack_cases(cases: dict[str, dict]) -> dict[str, str]:
    """SGLang's ``configure_aux_hidden_state_capture`` on each case's :func:`assembled`
    model, on the first of 2 PP stages, with the real capture hooks, for the case's
    ``method``: ``admitted``, ``refused: <message>`` (the runtime guard's
    ``NotImplementedError``) or ``<type>: <message>`` of any other error."""
    from sglang.srt.model_executor.model_runner_components import (
        attention_backend_setup as setup,
    )

    found = {}
    for name, spec in cases.items():
        method = spec["method"]
        group = FakePPGroup(0, 2)
        model = assembled(spec, group)
        _publish_pp_group(group)
        try:
            setup.configure_aux_hidden_state_capture(
                model=model,
                eagle_use_aux_hidden_state=method == "EAGLE3",
                eagle_aux_hidden_state_layer_ids=[1, 3, 5],
                dflash_use_aux_hidden_state=method != "EAGLE3",
                dflash_target_layer_ids=[1, 3, 5],
                is_dspark=method == "DSPARK",
                pp_size=2,
            )
        except NotImplementedError as exc:
            found[name] = f"refused: {exc}"
        except Exception as exc:  # reported: the test names what went wrong
            found[name] = f"{type(exc).__name__}: {exc}"
        else:
            found[name] = "admitted"
    return found


#: ``--flag ARG`` -> what it prints (the JSON of the call on ``ARG``).
COMMANDS = {
    "--verdicts": lambda arg: verdicts(json.loads(arg).get("archs"), json.loads(arg)["methods"]),
    "--aux": lambda arg: aux_cases(json.loads(arg)),
    "--pp": lambda arg: pp_cases(json.loads(arg)),
    "--relays": relays,
    "--refusals": lambda arg: refusals(json.loads(arg)),
    "--stacks": lambda arg: stack_cases(json.loads(arg)),
}


def main() -> None:
    if sys.argv[1:2]:
        print(json.dumps(COMMANDS[sys.argv[1]](sys.argv[2])))
        return
    results = {}
    for name, (fields, pp_spec) in PP_CASES.items():
        record = server_args(**fields)
        results[name] = _outcome(_pp_compat, record, pp_spec)
    if hasattr(validation_hook, "handle_aux_hidden_state_capture"):
        for name, fields in AUX_CASES.items():
            record = server_args(enable_return_aux_hidden_states=True, **fields)
            results[name] = _outcome(validation_hook.handle_aux_hidden_state_capture, record, False)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
