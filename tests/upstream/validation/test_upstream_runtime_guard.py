"""The runtime guard: ``check_pp_aux_capture`` before every runner call of a capture hook.

Small runner modules check the rewrite itself (the PP world size each scope has, the
imports, comments kept above, a second run changing nothing, the calls no check can be put
before); every release's runner (source trees, ``hook_trees``) gets a check before each of
its hook calls, in the file and function that release has; the part answers for a tree
without such calls, and a partial patch keeps its other parts.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from codemods.upstream import part
from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.tree.releases import LAST_BUILDS
from codemods.upstream.tree.sglang_tree import detect_tree
from codemods.upstream.validation.part import decide_guard
from codemods.upstream.validation.runtime_guard import (
    GROUP_SIZE,
    SELF_SIZE,
    guard,
    guard_changes,
    relay_test,
)

RUNNER = textwrap.dedent(
    """\
    import torch

    from sglang.srt.distributed import get_tensor_model_parallel_rank
    from sglang.srt.utils import helper


    class ModelRunner:
        def __init__(self, model, pp_size):
            self.model = model
            self.pp_size = pp_size

        def initialize(self, ids):
            if self.spec:
                # the draft's layers
                self.model.set_eagle3_layers_to_capture(ids)
            if self.dflash:
                self.model.set_dflash_layers_to_capture(ids)


    class GraphRunner:
        def __init__(self, runner):
            runner.model.set_eagle3_layers_to_capture()
            self.pp_size = runner.pp_size


    def configure(model, ids, is_dspark):
        if is_dspark:
            model.set_dspark_layers_to_capture(ids)
    """
)


def _checks(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "check_pp_aux_capture(" in line]


def test_each_call_gets_the_check_with_the_pp_size_its_scope_has():
    done = guard(RUNNER, "runner.py")
    assert not done.unguarded
    assert [(s.function, s.method, s.model, s.pp_size) for s in done.sites] == [
        ("ModelRunner.initialize", "EAGLE3", "self.model", SELF_SIZE),
        ("ModelRunner.initialize", "DFLASH", "self.model", SELF_SIZE),
        # pp_size is set after the call in __init__: not there yet
        ("GraphRunner.__init__", "EAGLE3", "runner.model", GROUP_SIZE),
        ("configure", "DSPARK", "model", GROUP_SIZE),
    ]
    assert _checks(done.text) == [
        'check_pp_aux_capture(self.model, "EAGLE3", self.pp_size)',
        'check_pp_aux_capture(self.model, "DFLASH", self.pp_size)',
        'check_pp_aux_capture(runner.model, "EAGLE3", get_pp_group().world_size)',
        'check_pp_aux_capture(model, "DSPARK", get_pp_group().world_size)',
    ]
    # Each check sits right above its call, at its indentation; the comment stays on top.
    assert (
        "            # the draft's layers\n"
        '            check_pp_aux_capture(self.model, "EAGLE3", self.pp_size)\n'
        "            self.model.set_eagle3_layers_to_capture(ids)\n"
    ) in done.text
    # isort order among the sglang imports, nothing else moved.
    assert done.text.startswith(
        "import torch\n\n"
        "from sglang.srt.distributed import get_tensor_model_parallel_rank\n"
        "from sglang.srt.distributed.parallel_state import get_pp_group\n"
        "from sglang.srt.layers.aux_hidden_states import check_pp_aux_capture\n"
        "from sglang.srt.utils import helper\n"
    )
    removed = [line for line in done.text.splitlines() if "check_pp_aux_capture" not in line]
    assert "\n".join(removed).replace(
        "from sglang.srt.distributed.parallel_state import get_pp_group\n", ""
    ) == RUNNER.rstrip("\n")
    compile(done.text, "runner.py", "exec")


def test_a_guarded_file_guards_to_itself():
    once = guard(RUNNER, "runner.py").text
    again = guard(once, "runner.py")
    assert again.text == once
    assert all(s.guarded for s in again.sites) and len(again.sites) == 4


def test_an_imported_get_pp_group_is_used_as_it_is():
    text = RUNNER.replace(
        "import get_tensor_model_parallel_rank",
        "import get_pp_group, get_tensor_model_parallel_rank",
    )
    done = guard(text, "runner.py")
    assert "parallel_state import get_pp_group" not in done.text
    assert 'check_pp_aux_capture(model, "DSPARK", get_pp_group().world_size)' in done.text


def test_a_long_check_is_wrapped_the_way_black_would():
    text = RUNNER.replace("self.model.set_dflash", "self.runner_with_a_long_name.model.set_dflash")
    done = guard(text, "runner.py")
    assert (
        "            check_pp_aux_capture(\n"
        '                self.runner_with_a_long_name.model, "DFLASH", self.pp_size\n'
        "            )\n"
    ) in done.text
    assert max(len(line) for line in done.text.splitlines()) <= 88


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("def f(m):\n    x = m.set_eagle3_layers_to_capture([1])\n", "not a statement"),
        ("def f(m):\n    if m: m.set_dflash_layers_to_capture([1])\n", "header"),
        ("m.set_eagle3_layers_to_capture([1])\n", "outside a function body"),
        ("def f(m):\n    while m.set_eagle3_layers_to_capture([1]):\n        pass\n", "header"),
    ],
)
def test_a_call_no_check_can_precede_is_named_and_nothing_changes(source, why):
    done = guard(source, "runner.py")
    assert done.text == source
    (refused,) = done.unguarded
    assert refused.path == "runner.py" and why in refused.why
    assert refused.describe().startswith("runner.py:")


def _tree(tmp_path, files: dict[str, str]):
    package = tmp_path / "sglang"
    for rel, text in {"__init__.py": "", "srt/__init__.py": "", **files}.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return detect_tree(tmp_path)


def _plan(tree) -> part.Plan:
    plan = part.Plan(tree)
    model = FileChange("sglang/srt/models/m.py", "x = 1\n", "x = 2\n", "family", Role.MODEL)
    plan.decided["family"] = part.applies([model])
    return plan


def test_the_part_answers_for_each_tree(tmp_path):
    tree = _tree(tmp_path / "a", {"srt/model_executor/model_runner.py": RUNNER})
    decision = decide_guard(tree, _plan(tree))
    assert decision.applies
    paths = [c.path for c in decision.changes]
    assert paths == [
        "sglang/srt/model_executor/model_runner.py",
        "sglang/srt/layers/aux_hidden_states.py",
    ]
    # No model part applies: nothing relays, so nothing to guard for; nor where the parts
    # that apply change nothing (a release whose models already relay on their own).
    assert decide_guard(tree, part.Plan(tree)).verdict is part.Verdict.NOT_APPLICABLE
    idle = part.Plan(tree)
    idle.decided["family"] = part.applies()
    assert decide_guard(tree, idle).verdict is part.Verdict.NOT_APPLICABLE
    bare = _tree(tmp_path / "b", {"srt/model_executor/model_runner.py": "import torch\n"})
    decision = decide_guard(bare, _plan(bare))
    assert decision.verdict is part.Verdict.NOT_APPLICABLE
    assert decision.reason == "sglang/srt/model_executor: no runner call of a capture hook"
    odd = _tree(
        tmp_path / "c",
        {
            "srt/model_executor/model_runner.py": RUNNER,
            "srt/model_executor/other.py": "def f(m):\n    y = m.set_dspark_layers_to_capture(1)\n",
        },
    )
    decision = decide_guard(odd, _plan(odd))
    assert decision.verdict is part.Verdict.LEFT_OUT and not decision.changes
    assert "sglang/srt/model_executor/other.py:2 in f" in decision.reason
    assert "silently" in decision.breaks
    # A runner file an earlier part changed keeps that change: the guard says so.
    plan = _plan(tree)
    runner = "sglang/srt/model_executor/model_runner.py"
    plan.decided["sizing"] = part.applies(
        [FileChange(runner, RUNNER, RUNNER + "x = 1\n", RUNTIME, Role.SIZING)]
    )
    decision = decide_guard(tree, plan)
    assert decision.verdict is part.Verdict.LEFT_OUT
    assert decision.reason == f"{runner} is already changed by the sizing part"


#: release -> {(file, function): methods} where the runner calls a capture hook.
_MODEL_RUNNER = "model_runner.py"
_GRAPH = ("cuda_graph_runner.py", "CudaGraphRunner.__init__")
_SETUP = ("attention_backend_setup.py", "configure_aux_hidden_state_capture")


def _expected(version: str) -> dict[tuple[str, str], list[str]]:
    index = LAST_BUILDS.index(version)
    if index >= LAST_BUILDS.index("0.5.16"):
        return {_SETUP: ["EAGLE3", "DSPARK", "DFLASH"]}
    if index >= LAST_BUILDS.index("0.5.11"):
        return {(_MODEL_RUNNER, "ModelRunner.init_aux_hidden_state_capture"): ["EAGLE3", "DFLASH"]}
    found = {_GRAPH: ["EAGLE3"], (_MODEL_RUNNER, "ModelRunner.initialize"): ["EAGLE3"]}
    if index >= LAST_BUILDS.index("0.5.6.post2"):
        found[(_MODEL_RUNNER, "ModelRunner._dummy_run")] = ["EAGLE3"]
    return found


#: One release per place the runner calls the hooks; the others are slow.
_QUICK = ("0.5.10.post1", "0.5.14", "0.5.23")


@pytest.mark.sglang
@pytest.mark.parametrize(
    "version",
    [v if v in _QUICK else pytest.param(v, marks=pytest.mark.slow) for v in LAST_BUILDS],
)
def test_every_release_guards_each_runner_call_of_a_capture_hook(version):
    from sglang_support.hook_trees import hook_tree

    tree = detect_tree(hook_tree(version))
    found = guard_changes(tree)
    assert not found.unguarded, version
    where: dict[tuple[str, str], list[str]] = {}
    for site in found.sites:
        where.setdefault((site.file, site.function), []).append(site.method)
        assert not site.guarded
        assert site.pp_size == (GROUP_SIZE if site.file == _SETUP[0] else SELF_SIZE), site
    assert where == _expected(version)
    for change in found.changes:
        compile(change.new, change.path, "exec")
        module = cst.parse_module(change.new)
        assert module.code == change.new
        # Every hook call of the file now follows its check, which is imported.
        lines = change.new.splitlines()
        calls = [n for n, line in enumerate(lines) if "_layers_to_capture(" in line]
        calls = [n for n in calls if "check_pp_aux_capture(" not in lines[n]]
        assert len(calls) == sum(1 for s in found.sites if s.path == change.path)
        assert all("check_pp_aux_capture(" in lines[n - 1] for n in calls), version
        assert "import check_pp_aux_capture" in change.new
        again = guard(change.new, change.path)
        assert again.text == change.new and all(s.guarded for s in again.sites), version


@pytest.mark.sglang
@pytest.mark.parametrize(
    ("version", "configure"),
    [
        ("0.5.14", "ModelRunner.init_aux_hidden_state_capture(runner)"),
        ("0.5.23", "setup.configure_aux_hidden_state_capture("),
    ],
)
def test_the_shipped_guard_test_configures_the_capture_where_the_release_does(version, configure):
    from sglang_support.hook_trees import hook_tree

    (text,) = relay_test(detect_tree(hook_tree(version))).values()
    assert "# @@" not in text
    compile(text, "test_pp_aux_relay.py", "exec")
    guard_test = text[text.index("def _configure_capture") :]
    assert guard_test.count("def _configure_capture") == 1
    assert configure in guard_test
    assert ("DSPARK" in guard_test.split("class TestRuntimeGuard")[0]) == (version == "0.5.23")


@pytest.mark.sglang
@pytest.mark.parametrize("name", ["kimi_linear", "kimi_k3"])
def test_a_rewritten_kimi_file_declares_its_dspark_relay(name):
    """The guard asks the class: Kimi's own rewrite (0.5.17-0.5.20) must declare DSPARK."""
    from sglang_support.hook_trees import hook_tree

    from codemods.upstream.kimi import part as kimi

    tree = detect_tree(hook_tree("0.5.20"))
    kimi_part = {"kimi_linear": kimi.LINEAR, "kimi_k3": kimi.K3}[name]
    decision = kimi_part.decide(tree, part.Plan(tree))
    assert decision.applies
    (model,) = [c for c in decision.changes if c.path.endswith(f"/{name}.py")]
    # Each class with the DSPARK hook (Kimi-K3's multimodal class delegates to its text
    # model's) declares it, the causal LM among them.
    declared = model.new.count('    pp_aux_relay_methods = ("DSPARK",)\n')
    assert declared == model.new.count("\n    def set_dspark_layers_to_capture(") >= 1
    pieces = model.new.split('    pp_aux_relay_methods = ("DSPARK",)')[:-1]
    declaring = [piece.rsplit("\nclass ", 1)[1].split("(")[0] for piece in pieces]
    assert any(name.endswith("ForCausalLM") for name in declaring), declaring
