"""The upstream PR description follows SGLang's template, claims only what the invocation did
and names only files the patch has."""

from __future__ import annotations

import re

from codemods.upstream.edit.change_kinds import TESTS, Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.output import series
from codemods.upstream.output.pr_body import (
    CHECKLIST,
    KIMI_TITLE,
    MAX_LINES,
    SECTIONS,
    render,
    touched_hooks,
    touched_models,
)
from codemods.upstream.sizing.graph_sizing import SIZING_MODULES
from codemods.upstream.sizing.part import no_graph_buffer
from codemods.upstream.tree.reachability import EVERY, refusals_in
from codemods.upstream.validation.relax import (
    _AUX_FLAG_CHECK,
    _AUX_FLAG_CHECK_NEW,
    AUX_FLAG_REASON,
    ValidationResult,
)
from codemods.upstream.validation.run_tests import STAND_INS, VALIDATED, Validation
from tests.upstream.output.test_upstream_series import (
    MODELS,
    PKG,
    _decision,
    _model,
    _result,
    _runtime,
    _validation,
)

VALIDATION_PATH = f"{PKG}/srt/arg_groups/validation_hook.py"
FAMILY_TEST = f"{PKG}/test/test_pp_aux_capture_family.py"


def _family_result(tmp_path, with_kimi: bool, tests: bool = False):
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",), hook="set_dflash_layers_to_capture"),
    ]
    changes = [
        _model(f"{MODELS}/llama.py"),
        _model(f"{MODELS}/qwen3_moe.py"),
        _runtime(f"{PKG}/srt/layers/aux_hidden_states.py", Role.RUNTIME_MODULE, None),
    ]
    if with_kimi:
        changes.append(_model(f"{MODELS}/kimi_linear.py"))
    if tests:
        changes.append(FileChange(FAMILY_TEST, None, "a = 2\n", TESTS, Role.FAMILY_TEST))
    return _result(tmp_path, changes, decisions)


def section(text: str, heading: str) -> str:
    """The text of one ``## `` section."""
    return text.split(heading + "\n", 1)[1].split("\n## ", 1)[0].lstrip("\n")


def assert_template(text: str) -> None:
    """SGLang's sections, in order, each once, and at most MAX_LINES lines."""
    assert text.startswith("# [PP] ") and len(text.splitlines()[0]) <= 90, text.splitlines()[0]
    positions = [text.find(f"\n{heading}\n") for heading in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), positions
    assert re.findall(r"^## .*$", text, flags=re.M) == list(SECTIONS)
    assert len(text.splitlines()) <= MAX_LINES, len(text.splitlines())


def test_title_motivation_and_modifications_cover_only_what_the_patch_touches(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=False))
    assert_template(text)
    assert text.splitlines()[0] == (
        "# [PP] Carry aux hidden states across pipeline stages (DFlash/EAGLE3)"
    )
    assert "Kimi" not in text
    assert "the capture hooks of 2 model files return early" in section(text, "## Motivation")
    mods = section(text, "## Modifications")
    assert "  - Llama / Qwen dense: `llama.py`" in mods
    assert "  - Qwen MoE / VL / hybrid: `qwen3_moe.py`" in mods
    assert f"`{PKG}/srt/layers/aux_hidden_states.py`" in mods
    # The module is created with the helpers; no packer accessor, so none is named.
    assert "(new: the helpers the patched hooks and forwards call)" in mods
    assert "captured()" not in text and "AuxHiddenStatePacker" not in text
    assert "with the width of its decoder stack's hidden states (`hidden_size=`" in mods


def test_kimi_is_named_only_when_the_patch_touches_it(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=True))
    assert_template(text)
    assert "DSPARK" in text.splitlines()[0]
    assert "Kimi-Linear refuses PP outright" in section(text, "## Motivation")
    assert "  - Kimi: `kimi_linear.py`" in section(text, "## Modifications")
    assert KIMI_TITLE != text.splitlines()[0]


def test_no_test_command_without_the_test_in_the_patch_and_nothing_claimed(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=True))
    assert "unittest" not in text and "sglang.test" not in text
    assert "[x]" not in text
    assert section(text, "## Checklist").count("- [ ]") == len(CHECKLIST)
    bench = section(text, "## Accuracy Tests")
    assert bench.startswith("Not run by the generator; this patch adds no test to run.")

    text = render(_family_result(tmp_path / "t", with_kimi=True, tests=True))
    bench = section(text, "## Accuracy Tests")
    assert "python3 -m unittest sglang.test.test_pp_aux_capture_family\n" in bench
    assert "sglang.test.test_pp_aux_capture\n" not in text  # the transport test is not added
    checklist = section(text, "## Checklist")
    assert checklist.count("- [x]") == 1 and "- [x] Add unit tests" in checklist


def test_validate_verdicts_are_reported_as_run(tmp_path):
    result = _family_result(tmp_path, with_kimi=False, tests=True)
    ran = Validation({"llama": VALIDATED, "qwen3_moe": "no: mismatch"})
    bench = section(render(result, validation=ran), "## Accuracy Tests")
    # The family test runs stand-ins on CPU: its results say so.
    assert bench.startswith(
        "CPU stand-in results: `auxcap upstream-patch --validate` ran `python3 -m unittest"
    )
    assert f"on a patched copy of this tree ({STAND_INS})." in bench
    assert "stand-in decoder layers (no attention kernels)" in STAND_INS
    assert "They do not exercise real weights, attention kernels or a GPU." in bench
    assert "- passed on CPU stand-ins (1): llama\n" in bench
    assert "- failed on CPU stand-ins (1): qwen3_moe\n" in bench
    assert VALIDATED.startswith("yes on CPU stand-ins:")
    assert "Not run" not in bench
    nothing = Validation(problem="No module named 'torch'")
    bench = section(render(result, validation=nothing), "## Accuracy Tests")
    assert bench.startswith("`--validate` ran nothing: No module named 'torch'.")
    assert "passed" not in bench


def test_series_is_listed_one_line_per_patch(tmp_path):
    result = _family_result(tmp_path, with_kimi=True)
    patches = series.build_series(result)
    files = series.render_series(patches, "A <a@example.com>")
    text = render(result, series=list(zip(files, patches, strict=True)))
    assert_template(text)
    lines = re.findall(r"^(\d+)\. `(.*?)`: (.*)$", text, flags=re.M)
    assert lines == [
        (str(n), name, p.subject)
        for n, (name, p) in enumerate(zip(files, patches, strict=True), start=1)
    ]


SIZING_PATHS = [
    f"{PKG}/srt/{module.removeprefix('sglang.srt.').replace('.', '/')}.py"
    for module in SIZING_MODULES
]
BUFFERS_PATH = SIZING_PATHS[2]


def _sizing(tmp_path, sized: list[str], dspark: bool) -> str:
    result = _family_result(tmp_path, with_kimi=False)
    for path in SIZING_PATHS:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("pp_proxy_dspark_hidden_size = 0\n" if dspark else "x = 0\n")
    role = Role.SIZING_RENAME if dspark else Role.SIZING
    result.changes += [_runtime(path, role) for path in sized]
    return section(render(result), "## Modifications")


def test_the_sizing_line_says_how_the_aux_entry_is_sized(tmp_path):
    unsized = _sizing(tmp_path / "a", [], False)
    assert f"not sized for the aux entry: {no_graph_buffer('`')}." in unsized
    assert "raises `RuntimeError` naming the missing layers" in unsized
    assert "serve with `--disable-cuda-graph`" in unsized
    renamed = _sizing(tmp_path / "b", [BUFFERS_PATH], dspark=True)
    assert (
        "SGLang's DSPARK entry and CUDA-graph sizing now serve every capture method" in renamed
        and "disabled" not in renamed
    )
    assert f"`{BUFFERS_PATH}`" in renamed
    assert "along a new path" in _sizing(tmp_path / "c", [BUFFERS_PATH], dspark=False)


def test_validation_change_is_motivated_and_listed(tmp_path):
    result = _family_result(tmp_path, with_kimi=False)
    # The release's refusal of the flag with PP, kept with its reason replaced.
    change = _validation(VALIDATION_PATH, _AUX_FLAG_CHECK, _AUX_FLAG_CHECK_NEW)
    result.changes.append(change)
    result.validation = ValidationResult(
        change, {"LlamaForCausalLM": ("EAGLE3",), "Qwen3MoeForCausalLM": ("DFLASH",)}
    )
    text = render(result)
    motivation, mods = section(text, "## Motivation"), section(text, "## Modifications")
    assert f"`check_pipeline_parallel_compat` (`{VALIDATION_PATH}`) rejects EAGLE3" in motivation
    # The flag is not among the problems the patch solves, nor said to be accepted.
    assert "--enable-return-aux-hidden-states" not in motivation
    assert "`--enable-return-aux-hidden-states` with PP, accepted" not in mods
    assert (
        f"- Validation (`{VALIDATION_PATH}`): EAGLE3/DFLASH accepted with PP where the served "
        "model class (resolved as the server does, `get_model_architecture`, so "
        "`--model-impl transformers` is refused) relays that method: it is listed in "
        "`pp_aux_relay_methods`, declared in the body of each causal-LM class whose hooks "
        "this patch rewrote (2 architectures in the patched files), and a subclass is "
        "covered only where it defines none of `__init__`, `forward` or the method's hook" in mods
    )
    assert (
        "These architectures are answered from a table of them and their methods in the "
        "hook, so the check imports no model code for them (the model registry imports "
        "every model).  Any other class is refused with a message naming the class, the "
        "method and the reason (its decoder stack is not patched to relay captures, its "
        "constructor refuses PP, it never splits its layers across stages, or the "
        "Transformers backend has no capture hooks); every other refusal kept." in mods
    )
    assert (
        "`--enable-return-aux-hidden-states` with PP stays refused for every model, the "
        f"relaying ones included; its message now gives the reason that holds: {AUX_FLAG_REASON}."
        in mods
    )
    assert "the first pipeline rank returns output to the detokenizer" in AUX_FLAG_REASON
    # No guard file in this tree: the runtime guard is not claimed.
    assert "Runtime guard" not in mods
    assert "stays refused:" not in mods
    # Where the speculative hook refuses DFLASH with PP, only EAGLE3 is claimed, and the
    # body says why DFLASH stays refused.
    hooks = tmp_path / PKG / "srt" / "arg_groups"
    hooks.mkdir(parents=True)
    (hooks / "speculative_hook.py").write_text(SPEC_HOOK)
    text = render(result)
    motivation, mods = section(text, "## Motivation"), section(text, "## Modifications")
    assert f"- Validation (`{VALIDATION_PATH}`): EAGLE3 accepted with PP where the served" in mods
    assert (
        "DFLASH with PP stays refused: `_handle_dflash` (`cfg.pp_size != 1`, named above)" in mods
    )
    assert "EAGLE3/DFLASH" not in text
    assert (
        f"**Still refused:** DFLASH with PP (`{PKG}/srt/arg_groups/speculative_hook.py`, "
        "`_handle_dflash`: `cfg.pp_size != 1`" in motivation
    )
    # Without a runner that configures a DSPARK target through the DFLASH hook, nothing
    # on the server reaches the DFLASH change.
    assert "the DFLASH capture change is reached only outside the server" in motivation
    runner = tmp_path / PKG / "srt" / "model_executor" / "model_runner_components"
    runner.mkdir(parents=True)
    (runner / "attention_backend_setup.py").write_text(DSPARK_FALLBACK)
    motivation = section(render(result), "## Motivation")
    assert (
        "the DFLASH capture change is reached by the server only through DSPARK with PP "
        "(`configure_aux_hidden_state_capture` calls `set_dflash_layers_to_capture` for a "
        "DSPARK target that has no `set_dspark_layers_to_capture`) on this release."
    ) in motivation
    # Without the validation change none of it is claimed.
    text = render(_family_result(tmp_path / "b", False))
    assert "check_pipeline" not in text and "Validation" not in text


def test_benchmarking_says_how_a_dflash_only_patch_is_reached(tmp_path):
    """No algorithm accepted with PP: the DFLASH hooks are reached through DSPARK where the
    runner falls back to them, else by no server configuration."""
    result = _family_result(tmp_path, with_kimi=False)
    change = _validation(VALIDATION_PATH, _AUX_FLAG_CHECK, _AUX_FLAG_CHECK_NEW)
    result.changes.append(change)
    result.validation = ValidationResult(change, {"Qwen3MoeForCausalLM": ("DFLASH",)})
    hooks = tmp_path / PKG / "srt" / "arg_groups"
    hooks.mkdir(parents=True)
    (hooks / "speculative_hook.py").write_text(SPEC_HOOK)
    (tmp_path / PKG / "launch_server.py").write_text("")
    mods = section(render(result), "## Modifications")
    assert (
        f"- Validation (`{VALIDATION_PATH}`): no speculative algorithm is newly accepted with "
        "PP for the patched model classes (`pp_aux_relay_methods`, declared in the body of "
        "each causal-LM class whose hooks this patch rewrote: 1 architecture in the patched "
        "files); every other refusal kept. DFLASH with PP stays refused:"
    ) in mods
    bench = section(render(result), "## Benchmarking and Profiling")
    assert bench.startswith("Not run: no server configuration of this release reaches"), bench
    runner = tmp_path / PKG / "srt" / "model_executor"
    runner.mkdir(parents=True)
    (runner / "setup.py").write_text(DSPARK_FALLBACK)
    bench = section(render(result), "## Benchmarking and Profiling")
    assert bench.startswith(
        "Not run: on this release the server reaches the change with PP only through DSPARK"
    ), bench
    assert "launch_server" not in bench


#: 0.5.16+'s ``configure_aux_hidden_state_capture``, reduced to its DFLASH/DSPARK branch.
DSPARK_FALLBACK = """\
def configure_aux_hidden_state_capture(*, model, dflash_use_aux_hidden_state, ids, is_dspark):
    if dflash_use_aux_hidden_state:
        if is_dspark and hasattr(model, "set_dspark_layers_to_capture"):
            model.set_dspark_layers_to_capture(ids)
        elif hasattr(model, "set_dflash_layers_to_capture"):
            model.set_dflash_layers_to_capture(ids)
"""


OLD_CHECK = """\
def check_server_args(cfg):
    if cfg.pp_size > 1:
        if get_platform().is_npu:
            assert cfg.disable_overlap_schedule
        else:
            assert cfg.disable_overlap_schedule and cfg.speculative_algorithm is None, (
                "Pipeline parallelism is not compatible with speculative decoding"
            )
"""
SPEC_HOOK = """\
def _handle_dflash(cfg):
    if cfg.pp_size != 1:
        raise ValueError("Currently DFLASH speculative decoding only supports pp_size == 1.")


def _handle_dspark(cfg):
    if cfg.pp_size != 1:
        if cfg.disaggregation_mode != "prefill":
            raise ValueError("DSpark PP requires PD prefill")


def _handle_uno(cfg):
    if cfg.pp_size != 1:
        raise ValueError("UNO requires PP=1")
"""


def test_the_detector_finds_the_refusals_left_in_a_release():
    (every,) = refusals_in(OLD_CHECK, "sglang/srt/arg_groups/validation_hook.py")
    assert (every.algorithm, every.function, every.condition) == (
        EVERY,
        "check_server_args",
        "cfg.pp_size > 1",
    )
    assert every.except_npu and every.line == 6
    path = "sglang/srt/arg_groups/speculative_hook.py"
    dflash, dspark = refusals_in(SPEC_HOOK, path)  # UNO reads no captures
    assert (dflash.algorithm, dflash.conditional) == ("DFLASH", False)
    assert dflash.message.startswith("Currently DFLASH")
    assert (dspark.algorithm, dspark.conditional) == ("DSPARK", True)
    assert refusals_in(SPEC_HOOK, "sglang/srt/server_args.py") == []


def test_the_body_says_which_configurations_reach_the_change(tmp_path):
    result = _family_result(tmp_path, with_kimi=False)
    hooks = tmp_path / PKG / "srt" / "arg_groups"
    hooks.mkdir(parents=True)
    (hooks / "validation_hook.py").write_text(OLD_CHECK)
    (hooks / "speculative_hook.py").write_text(SPEC_HOOK)
    motivation = section(render(result), "## Motivation")
    assert (
        "the server refuses speculative decoding with `--pp-size > 1` on non-NPU "
        f"platforms (`{VALIDATION_PATH}`, `check_server_args`: `assert ... "
        "speculative_algorithm is None` under `cfg.pp_size > 1`), so no server "
        "configuration reaches the change there"
    ) in motivation
    assert "Also refused with PP there: DFLASH (`_handle_dflash`" in motivation
    # Once the general refusal is gone (the patch's new text counts), each one left is named.
    result.changes.append(
        _validation(VALIDATION_PATH, OLD_CHECK, "def check_server_args(cfg):\n    pass\n")
    )
    motivation = section(render(result), "## Motivation")
    assert "no server configuration" not in motivation
    assert "**Still refused:** DFLASH with PP" in motivation
    assert "**Still checked:** DSPARK with PP is accepted only where" in motivation


# ------------------------------------------------------------------ real releases
# The release bodies are checked by ``test_upstream_series``'s release test, which generates
# each release once for the series and the description.

_CODE = re.compile(r"`([^`]+)`")


def check_release_body(result, version: str, patch_series) -> None:
    """The description of one release: template, bound, and only the patch's files."""
    text = render(result, series=patch_series)
    assert_template(text)
    changed = set(result.changed)
    names = {path.rsplit("/", 1)[-1] for path in changed}
    mods = section(text, "## Modifications")
    # A package tree's patch leaves its tests out; the body names them as left out.
    left_out = set(result.tests) if result.tests_left_out else set()
    for token in _CODE.findall(mods):
        if token.endswith(".py"):
            assert token in changed or token in names or token in left_out, (version, token)
    for module in re.findall(r"python3 -m unittest (\S+)", text):
        assert f"{module.replace('.', '/')}.py" in changed, (version, module)
    models, hooks = touched_models(result), touched_hooks(result)
    assert models and hooks
    # One count, one source: the files whose hooks return early, as a reading of the
    # release's hooks gives them; the others the patch relays are named as such.
    from tests.upstream.output.release_texts import assert_quotes_in_release, early_return_by_text

    count = int(re.search(r"the capture hooks of (\d+) model files", text).group(1))
    early = early_return_by_text(result)
    assert count == len(early), (version, count, sorted(early))
    # Subclasses that inherit patched hooks and get their own stack patched have a line
    # of their own.
    inheriting = [f for f in result.family.patched if result.family.decisions[f].inherits]
    others = len(result.family.patched) - len(early) - len(inheriting)
    assert (f"1. in {others} more model files" in text) is (others > 0), version
    for file in inheriting:
        assert f"(`{file}`) inherits the hooks of" in text, (version, file)
    assert_quotes_in_release(result, text)
    motivation = section(text, "## Motivation")
    old_release = version in ("0.5.18", "0.5.19", "0.5.20")
    assert ("so no server configuration reaches the change" in motivation) is old_release
    if not old_release:
        assert "**Still refused:** DFLASH with PP" in motivation
        assert "`check_pipeline_parallel_compat`" in motivation
    if left_out:
        assert "- Tests: none in this patch (see Accuracy Tests)." in mods
        assert "are left out of this patch" not in mods and "[x]" not in text
        assert section(text, "## Accuracy Tests").count("are left out of this patch") == 1
    else:
        assert "[x] Add unit tests" in text and text.count("[x]") == 1
