"""The upstream PR description claims only what the invocation did and names what it touches."""

from __future__ import annotations

import re

import pytest

from codemods.upstream import series
from codemods.upstream.generate import generate
from codemods.upstream.graph_sizing import SIZING_MODULES
from codemods.upstream.pr_body import KIMI_TITLE, render, touched_hooks, touched_models
from codemods.upstream.validation import ValidationResult
from tests.test_upstream_series import MODELS, PKG, _change, _decision, _result

VALIDATION_PATH = f"{PKG}/srt/arg_groups/validation_hook.py"


def _family_result(tmp_path, with_kimi: bool):
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",), hook="set_dflash_layers_to_capture"),
    ]
    changes = [_change(f"{MODELS}/llama.py"), _change(f"{MODELS}/qwen3_moe.py"),
               _change(f"{PKG}/srt/distributed/pp_aux_transport.py", None)]
    if with_kimi:
        changes.append(_change(f"{MODELS}/kimi_linear.py"))
    return _result(tmp_path, changes, decisions)


def test_title_and_motivation_cover_every_touched_model_and_hook(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=False))
    title = text.splitlines()[0]
    assert "Kimi" not in title
    assert title == ("# [PP] Carry aux hidden states across pipeline stages: 2 models "
                     "(DFlash/EAGLE3 capture)")
    motivation = text.split("## Motivation", 1)[1].split("## Design", 1)[0]
    assert "Kimi" not in motivation and "KimiLinear" not in text.split("## Design")[1].split(
        "## Bytes")[0]
    for needle in ("`llama`", "`qwen3_moe`", "`set_eagle3_layers_to_capture`",
                   "`set_dflash_layers_to_capture`"):
        assert needle in motivation, needle


def test_kimi_is_named_only_when_the_patch_touches_it(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=True))
    title = text.splitlines()[0]
    assert title.startswith("# [PP] Carry aux hidden states across pipeline stages: 3 models")
    assert "DSPARK" in title
    motivation = text.split("## Motivation", 1)[1].split("## Design", 1)[0]
    assert "KimiLinearForCausalLM.set_dspark_layers_to_capture" in motivation
    assert "`kimi_linear`" in motivation
    assert KIMI_TITLE != title


def test_nothing_is_ticked_or_called_validated_without_a_run(tmp_path):
    text = render(_family_result(tmp_path, with_kimi=True))
    assert "[x]" not in text
    plan = text.split("## Test plan", 1)[1]
    assert plan.count("- [ ]") == 4
    rows = [line for line in text.splitlines() if line.startswith("| `llama.py`")
            or line.startswith("| `qwen3_moe.py`")]
    assert len(rows) == 2
    for row in rows:
        assert row.rstrip(" |").endswith("not run (see Test plan)"), row


def test_series_body_has_one_section_per_patch(tmp_path):
    result = _family_result(tmp_path, with_kimi=True)
    patches = series.build_series(result)
    files = series.render_series(patches, "A <a@example.com>")
    text = render(result, series=list(zip(files, patches, strict=True)))
    headings = re.findall(r"^### (\d+)\. (.*)$", text, flags=re.M)
    assert headings == [(str(n), p.subject) for n, p in enumerate(patches, start=1)]
    for name in files:
        assert f"`{name}`" in text


SIZING_PATHS = [f"{PKG}/srt/{module.removeprefix('sglang.srt.').replace('.', '/')}.py"
                for module in SIZING_MODULES]
BUFFERS_PATH, PREFILL_PATH = SIZING_PATHS[2], SIZING_PATHS[4]


def _graph_section(tmp_path, sized: list[str], dspark: bool) -> str:
    result = _family_result(tmp_path, with_kimi=False)
    for path in SIZING_PATHS:
        target = tmp_path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("pp_proxy_dspark_hidden_size = 0\n" if dspark else "x = 0\n")
    result.changes += [_change(path) for path in sized]
    section = render(result).split("## CUDA graphs", 1)
    if len(section) == 1:
        return render(result).split("## Known limitation", 1)[1].split("\n## ", 1)[0]
    return "## CUDA graphs" + section[1].split("\n## ", 1)[0]


def test_the_cuda_graph_section_says_how_the_aux_entry_is_sized(tmp_path):
    unsized = _graph_section(tmp_path / "a", [], dspark=False)
    assert "CUDA graphs disabled on non-first stages" in unsized
    mirrored = _graph_section(tmp_path / "b", [BUFFERS_PATH], dspark=True)
    assert mirrored.startswith("## CUDA graphs")
    assert "along the path that sizes\n`dspark_hidden_states`" in mirrored
    for sized, runners in (([BUFFERS_PATH], "decode graph runner (the prefill one keeps no"),
                           ([BUFFERS_PATH, PREFILL_PATH], "decode and prefill graph runners")):
        added = _graph_section(tmp_path / f"c{len(sized)}", sized, dspark=False)
        assert added.startswith("## CUDA graphs") and "disabled" not in added
        assert "dspark" not in added
        assert runners in " ".join(added.split())
        assert "pre-planned `load_batch` branch" in " ".join(added.split())


def _sections(text: str) -> tuple[str, str, str, str]:
    """(title, motivation, design, test plan) of a rendered description."""
    motivation = text.split("## Motivation", 1)[1].split("## Design", 1)[0]
    design = text.split("## Design", 1)[1].split("## Bytes on the wire", 1)[0]
    plan = text.split("## Test plan", 1)[1].split("## ", 1)[0]
    return text.splitlines()[0], motivation, design, plan


def test_validation_change_is_motivated_designed_and_left_unticked(tmp_path):
    result = _family_result(tmp_path, with_kimi=False)
    old = ('raise ValueError("--enable-return-aux-hidden-states only supports pp_size == 1")'
           "\n")
    change = _change(VALIDATION_PATH, old, "relaxed = True\n")
    result.changes.append(change)
    result.validation = ValidationResult(change, {"LlamaForCausalLM": ("EAGLE3",),
                                                  "Qwen3MoeForCausalLM": ("DFLASH",)})
    title, motivation, design, plan = _sections(render(result))
    assert title.endswith("(DFlash/EAGLE3 capture), and the PP server-arg checks for them")
    assert "`check_pipeline_parallel_compat`" in motivation
    assert "rejects EAGLE3 and DFLASH speculative decoding" in motivation
    assert "`--enable-return-aux-hidden-states` with PP" in motivation
    assert f"**Server-arg validation** (the patch's last change,\n  `{VALIDATION_PATH}`)" \
        in design
    assert "- `LlamaForCausalLM`: EAGLE3" in design
    assert "- `Qwen3MoeForCausalLM`: DFLASH" in design
    assert "`--enable-return-aux-hidden-states` with PP is accepted" in design
    assert "- [ ] Server-arg validation: EAGLE3/DFLASH and `--enable-return-aux-" in plan
    assert "[x]" not in plan

    # Without the validation change none of it is claimed.
    title, motivation, design, plan = _sections(render(_family_result(tmp_path, False)))
    for text in (title, motivation, design, plan):
        assert "server-arg" not in text.lower() and "check_pipeline" not in text


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("version", ("0.5.21", "0.5.22", "0.5.23"))
def test_release_body_covers_every_model_hook_and_the_validation_change(sglang_release,
                                                                        version):
    result = generate(sglang_release(version))
    title, motivation, design, plan = _sections(render(result))
    models, hooks = touched_models(result), touched_hooks(result)
    assert f": {len(models)} models (DFlash/DSPARK/EAGLE3 capture)" in title
    assert title.endswith(", and the PP server-arg checks for them")
    for name in models:
        assert f"`{name}`" in motivation, name
    for hook in hooks:
        assert f"`{hook}`" in motivation, hook
    validation_path = result.tree.module_path("sglang.srt.arg_groups.validation_hook")
    assert validation_path in result.changed
    assert f"(`{validation_path}`) rejects EAGLE3 and DFLASH" in motivation
    assert "**Server-arg validation**" in design
    # Every architecture the validation table accepts is listed in the design.
    assert result.validation is not None and result.validation.architectures
    for architecture, kinds in result.validation.architectures.items():
        assert f"- `{architecture}`: {', '.join(kinds)}" in design, architecture
    # 0.5.23 also refuses --enable-return-aux-hidden-states with PP; 0.5.21/22 do not.
    refuses_flag = version == "0.5.23"
    assert ("`--enable-return-aux-hidden-states` with PP is accepted" in design) is \
        refuses_flag
    # Nothing was run by this invocation: no box is ticked.
    assert "[x]" not in plan and "- [ ] Server-arg validation" in plan
