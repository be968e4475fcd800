"""Commit messages of the series' patches, each about its own files only.

* the runtime patch names each shipped module and sizing file it adds or changes, and the
  command that runs the transport's test when the test is in it;
* a model-family patch names, per model file, the hooks it changes, how the file's capture
  forward carries the captures, and any other fix the patch makes in that file; a file
  changed only as another model's capture forward says so;
* the validation patch names the file, the architectures it accepts and for which capture,
  the algorithms it accepts, and any refusal left elsewhere that keeps one of them refused
  (``reachability.py``; DFLASH in ``_handle_dflash`` on 0.5.21-0.5.23).
"""

from __future__ import annotations

import textwrap

from codemods.upstream import names
from codemods.upstream.family_patch import TEST_FILE as FAMILY_TEST_FILE
from codemods.upstream.family_report import CAPTURE_KINDS
from codemods.upstream.generate import UpstreamResult
from codemods.upstream.result_facts import (
    AUX_FLAG,
    accepted_algorithms,
    kimi_relay_checked,
    relaxes_aux_flag,
    test_command,
)

#: What each shipped runtime file is, by file name.
RUNTIME_FILES = {
    "pp_aux_transport.py": "the transport (pure torch.distributed): relay (captures ride "
    "the stage handoff) or direct (isend to the last rank)",
    "pp_aux_plan.py": "torch-free capture plan: layer partition (get_pp_indices), owner "
    "stage and width of every capture",
    "pp_aux_capture.py": "glue the model files call (attach_pp_aux_transport, "
    "pp_aux_outgoing, pp_aux_collect); SGLANG_PP_AUX_TRANSPORT picks the mode",
    "test_pp_aux_capture.py": "CPU multi-process unittest of the transport (gloo, 2 and 3 "
    "stages, relay and direct, compared with PP=1)",
}
SIZING_WORDS = "sizes the aux_hidden_states PP proxy buffer of non-first stages"


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, width=72, break_on_hyphens=False, break_long_words=False,
                         subsequent_indent=indent) + "\n"


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def fill_message(patch, result: UpstreamResult) -> None:
    """Fill ``patch.subject`` and ``patch.body`` (a ``series.SeriesPatch``)."""
    from codemods.upstream.series import TRANSPORT, VALIDATION

    if patch.key == TRANSPORT:
        _runtime(patch, result)
    elif patch.key == VALIDATION:
        _validation(patch, result)
    else:
        _family(patch, result, patch.subject)


def _runtime(patch, result: UpstreamResult) -> None:
    sizing = [p for p in patch.paths if _name(p) not in RUNTIME_FILES]
    patch.subject = "[PP] Add the PP aux hidden-state transport" + (
        " and size its proxy buffers" if sizing else "")
    lines = [_wrap(f"- {_name(p)}: {RUNTIME_FILES.get(_name(p), SIZING_WORDS)}.", "  ")
             for p in patch.paths]
    tests = [p for p in patch.paths if _name(p).startswith("test_")]
    patch.body = (
        "Captures made on earlier pipeline stages reach the last stage, which\n"
        "rebuilds the list a PP=1 run produces and raises, naming the layers, when\n"
        "one is missing.  No model calls this yet; the model patches that follow do.\n\n"
        + "".join(lines)
        + "".join(f"\nTest: {test_command(result, p)}\n" for p in tests)
    )


def _validation(patch, result: UpstreamResult) -> None:
    found = result.validation.architectures if result.validation is not None else {}
    refused = [kind for kind in ("EAGLE3", "DFLASH")
               if any(kind in kinds for kinds in found.values())] or ["EAGLE3", "DFLASH"]
    accepted, left = accepted_algorithms(result)
    if accepted:
        patch.subject = f"[PP] Accept {'/'.join(accepted)} with PP for the patched architectures"
    elif relaxes_aux_flag(result):
        patch.subject = "[PP] Accept aux hidden-state capture with PP for patched models"
    else:
        patch.subject = "[PP] Name the patched architectures in the PP validation"
    listed = "; ".join(f"{arch} ({', '.join(ks)})" for arch, ks in sorted(found.items()))
    draftless = (" (a capture without a draft, so for every convention listed)" if left
                 else "")
    flag = (f" {AUX_FLAG} with PP is accepted for them too{draftless}."
            if relaxes_aux_flag(result) else "")
    files = ", ".join(_name(p) for p in patch.paths)
    still = "".join(
        "\n" + _wrap(f"Still refused after this series: {r.algorithm} with PP "
                      f"({_name(r.path)}, {r.function}: {r.condition}), so "
                      f"check_pipeline_parallel_compat keeps refusing {r.algorithm} too: "
                      "accepting it there could not run.") for r in left)
    accepts = (f"It now accepts {' and '.join(accepted)} for" if accepted
               else "It now names")
    patch.body = _wrap(
        f"check_pipeline_parallel_compat ({files}) refused {' and '.join(refused)} "
        f"speculative decoding with PP.  {accepts} the {len(found)} "
        f"architecture{'s' if len(found) != 1 else ''} whose capture hooks the model patches of this series rewrote "
        f"(capture conventions in brackets): {listed}.{flag}  Every other refusal is "
        "kept, and any other architecture is refused as before.") + still


def _hooks_of(decision) -> str:
    hooks = [f"{outer}.{hook}" for outer, _, hs in decision.cases for hook in hs]
    return ", ".join(dict.fromkeys(hooks))


def _kimi_line(path: str, result: UpstreamResult) -> str:
    name = _name(path)
    if name == "kimi_linear.py" and kimi_relay_checked(result):
        return ("SGLang's own DSPARK relay: a stage whose dspark_hidden_states "
                "entry is missing, of another width or unexpected now raises "
                "RuntimeError naming the layers")
    k3 = ("; relay mode only (the next stage finishes a stage's last-layer capture, "
          "attention residuals)" if name == "kimi_k3.py" else "")
    return (f"set_dspark_layers_to_capture no longer raises \"{names.PP_ERROR}\" under "
            "PP: it stores the ids on every rank and attaches the transport; the forward "
            "hands each stage's captures on and the last stage collects them in layer "
            f"order{k3}")


def _family(patch, result: UpstreamResult, title: str) -> None:
    plan = result.family
    decisions = plan.decisions if plan is not None else {}
    patch.subject = f"[PP] {title}: carry aux hidden states across stages"
    kimi_only = all(_name(p).startswith("kimi") for p in patch.paths if "/models/" in p)
    if kimi_only and kimi_relay_checked(result) and not any(
            d.patched for d in decisions.values() if d.name in patch.models):
        patch.subject = "[PP] Kimi-Linear: raise when the DSPARK relay hands on fewer captures"
    if len(patch.subject) > 72:
        patch.subject = f"[PP] {title}: aux hidden states across stages"
    lines = []
    for path in patch.paths:
        if "/models/" not in path:
            continue
        name = _name(path)
        decision = decisions.get(name)
        if name.startswith("kimi") and (decision is None or not decision.patched):
            lines.append(_wrap(f"- {name}: {_kimi_line(path, result)}.", "  "))
            continue
        if decision is not None and decision.patched:
            kinds = "; ".join(CAPTURE_KINDS.get(k, k) for k in decision.capture_kinds)
            text = (f"- {name}: {_hooks_of(decision)} store the ids on every rank instead "
                    f"of returning off the last one; forward {decision.forward} "
                    f"({kinds}) adds its captures to the PP handoff and the last stage "
                    "gathers them in PP=1 order.")
            text += "".join(f"  Separate fix in this file: {fix}." for fix in decision.fixes)
            lines.append(_wrap(text, "  "))
            continue
        users = sorted(d.name for d in decisions.values()
                       if d.patched and d.forward is not None and d.forward.file == name)
        what = (f"capture forward of {', '.join(users)}" if users
                else "changed for the models of this patch")
        lines.append(_wrap(f"- {name}: {what}.", "  "))
    test = ""
    tests = [c for c in patch.changes if c.path.endswith(FAMILY_TEST_FILE)]
    if tests:
        old, new = tests[0].old or "", tests[0].new or ""
        added = sorted(d.name for d in decisions.values()
                       if f'"{d.name}"' in new and f'"{d.name}"' not in old)
        test = (f"\nTest: {test_command(result, tests[0].path)} (this patch adds "
                f"{', '.join(added) or 'no model'} to it).\n")
    patch.body = (_wrap(f"Models: {', '.join(sorted(dict.fromkeys(patch.models)))}.  "
                        "With PP=1 nothing changes.") + "\n" + "".join(lines) + test)
