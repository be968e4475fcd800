"""The runtime guard: ``check_pp_aux_capture`` after every runner call of a capture hook.

Small runner modules check the rewrite itself (the PP world size each scope has, the
imports, comments kept above, a second run changing nothing, the calls no check can be put
after); every release's runner (source trees, ``hook_trees``) gets a check after each of
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
from codemods.upstream.validation.guard_package import guard_changes, pass_pp_size
from codemods.upstream.validation.part import decide_guard
from codemods.upstream.validation.runtime_guard import (
    GROUP_SIZE,
    PARAM,
    PARAM_DEF,
    SELF_SIZE,
    guard,
    relay_test,
    with_parameter,
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

        def init_capture(self, ids):
            configure(self.model, ids, is_dspark=True)


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
        # a module-level function: the parameter its callers pass
        ("configure", "DSPARK", "model", PARAM),
    ]
    assert done.functions == ("configure",)
    assert _checks(done.text) == [
        'check_pp_aux_capture(self.model, "EAGLE3", self.pp_size)',
        'check_pp_aux_capture(self.model, "DFLASH", self.pp_size)',
        'check_pp_aux_capture(runner.model, "EAGLE3", get_pp_group().world_size)',
        'check_pp_aux_capture(model, "DSPARK", pp_size)',
    ]
    assert "def configure(model, ids, is_dspark, pp_size: int = 1):\n" in done.text
    # Each check sits right below its call, at its indentation; the comment stays on top.
    assert (
        "            # the draft's layers\n"
        "            self.model.set_eagle3_layers_to_capture(ids)\n"
        '            check_pp_aux_capture(self.model, "EAGLE3", self.pp_size)\n'
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
    ).replace(", pp_size: int = 1)", ")") == RUNNER.rstrip("\n")
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
    assert 'check_pp_aux_capture(runner.model, "EAGLE3", get_pp_group().world_size)' in done.text


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
    # A runner file an earlier part changed: the guard builds on that change (the
    # release's text stays the old one), and the series cuts it by part.
    plan = _plan(tree)
    runner = "sglang/srt/model_executor/model_runner.py"
    plan.decided["sizing"] = part.applies(
        [FileChange(runner, RUNNER, RUNNER + "x = 1\n", RUNTIME, Role.SIZING)]
    )
    decision = decide_guard(tree, plan)
    assert decision.applies
    (change,) = [c for c in decision.changes if c.path == runner]
    assert change.old == RUNNER and change.new.endswith("\nx = 1\n")
    assert len(_checks(change.new)) == 4


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


def _runner_size(version: str) -> str:
    """How ``ModelRunner`` passes its PP size in the release (0.5.16+)."""
    index = LAST_BUILDS.index(version)
    if index >= LAST_BUILDS.index("0.5.22"):
        return "self.pp_group.world_size"
    if index >= LAST_BUILDS.index("0.5.21"):
        return "self.pp_size"
    return "self.ps.pp_size"


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
        assert site.pp_size == (PARAM if site.file == _SETUP[0] else SELF_SIZE), site
    assert where == _expected(version)
    # configure_aux_hidden_state_capture gets pp_size from ModelRunner's one call, as the
    # runner knows its PP size there.
    index = LAST_BUILDS.index(version)
    assert [(c.file, c.function, c.callee, c.pp_size, c.passed) for c in found.callers] == (
        [
            (
                _MODEL_RUNNER,
                "ModelRunner.init_attention_backends",
                _SETUP[1],
                _runner_size(version),
                False,
            )
        ]
        if index >= LAST_BUILDS.index("0.5.16")
        else []
    )
    changed = sorted(c.path.rsplit("/", 1)[-1] for c in found.changes)
    assert changed == sorted({s.file for s in found.sites} | {c.file for c in found.callers})
    for change in found.changes:
        # No PP group asked: the size comes from the runner.
        assert change.new.count("get_pp_group") == (change.old or "").count("get_pp_group")
        compile(change.new, change.path, "exec")
        module = cst.parse_module(change.new)
        assert module.code == change.new
        # Every hook call of the file is now followed by its check, which is imported.
        lines = change.new.splitlines()
        calls = [n for n, line in enumerate(lines) if "_layers_to_capture(" in line]
        calls = [n for n in calls if "check_pp_aux_capture(" not in lines[n]]
        assert len(calls) == sum(1 for s in found.sites if s.path == change.path)
        assert all("check_pp_aux_capture(" in lines[_after(lines, n)] for n in calls), version
        guarded = any(s.path == change.path for s in found.sites)
        assert ("import check_pp_aux_capture" in change.new) is guarded, change.path
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


SETUP = textwrap.dedent(
    """\
    import logging


    def configure_capture(
        *,
        model,
        eagle: bool,
        ids,
    ) -> None:
        \"\"\"Configure the capture.\"\"\"
        if eagle:
            model.set_eagle3_layers_to_capture(ids)
    """
)

CALLER = textwrap.dedent(
    """\
    from sglang.srt.model_executor.setup import configure_capture


    class ModelRunner:
        def __init__(self, ps):
            self.ps = ps

        def init_memory(self):
            make_pool(
                pp_size=self.ps.pp_size,
            )

        def init_backends(self):
            configure_capture(
                model=self.model,
                eagle=self.eagle,
                ids=self.ids,
            )
    """
)


def test_a_module_level_function_takes_pp_size_from_the_runners_call(tmp_path):
    """The shape of 0.5.16+: ``configure_aux_hidden_state_capture(*, ...)`` in a module of
    its own, called with keywords by ``ModelRunner``, which knows its PP size as it passes
    it elsewhere.  No ``get_pp_group()``: SGLang's own callers (no PP group, PP=1) keep
    working without ``pp_size``."""
    tree = _tree(
        tmp_path,
        {
            "srt/model_executor/__init__.py": "",
            "srt/model_executor/setup.py": SETUP,
            "srt/model_executor/model_runner.py": CALLER,
        },
    )
    found = guard_changes(tree)
    assert not found.unguarded
    assert [(s.function, s.pp_size) for s in found.sites] == [("configure_capture", PARAM)]
    (call,) = found.callers
    assert (call.file, call.line, call.function, call.callee, call.pp_size, call.passed) == (
        "model_runner.py",
        14,
        "ModelRunner.init_backends",
        "configure_capture",
        "self.ps.pp_size",
        False,
    )
    new = {c.path.rsplit("/", 1)[-1]: c.new for c in found.changes}
    assert new["setup.py"] == SETUP.replace(
        "    ids,\n) -> None:", "    ids,\n    pp_size: int = 1,\n) -> None:"
    ).replace(
        "import logging\n",
        "import logging\n\nfrom sglang.srt.layers.aux_hidden_states import check_pp_aux_capture\n",
    ).replace(
        "        model.set_eagle3_layers_to_capture(ids)\n",
        "        model.set_eagle3_layers_to_capture(ids)\n"
        '        check_pp_aux_capture(model, "EAGLE3", pp_size)\n',
    )
    assert new["model_runner.py"] == CALLER.replace(
        "            ids=self.ids,\n",
        "            ids=self.ids,\n            pp_size=self.ps.pp_size,\n",
    )
    assert not any("get_pp_group" in text for text in new.values())
    for path, text in new.items():
        compile(text, path, "exec")
    # Patched, the tree guards to nothing: the parameter and the argument are there.
    patched = _tree(
        tmp_path / "patched",
        {
            "srt/model_executor/__init__.py": "",
            "srt/model_executor/setup.py": new["setup.py"],
            "srt/model_executor/model_runner.py": new["model_runner.py"],
        },
    )
    again = guard_changes(patched)
    assert not again.changes and not again.unguarded
    assert [c.passed for c in again.callers] == [True]


def test_without_a_runner_value_the_caller_passes_the_pp_group_size(tmp_path):
    caller = CALLER.replace("self.ps.pp_size", "self.pp_group_size")
    tree = _tree(
        tmp_path,
        {
            "srt/model_executor/__init__.py": "",
            "srt/model_executor/setup.py": SETUP,
            "srt/model_executor/model_runner.py": caller.replace(
                "    def init_memory(self):",
                "    def init_cache(self):\n        make_cache(pp_size=self.ps.pp_size)\n\n"
                "    def init_memory(self):",
            ),
        },
    )
    # Two values the runner passes as pp_size: neither is taken for it.
    (call,) = guard_changes(tree).callers
    assert call.pp_size == GROUP_SIZE
    (runner,) = [c for c in guard_changes(tree).changes if c.path.endswith("model_runner.py")]
    assert "pp_size=get_pp_group().world_size,\n" in runner.new
    assert "from sglang.srt.distributed.parallel_state import get_pp_group\n" in runner.new


@pytest.mark.parametrize(
    ("caller", "why"),
    [
        ("        configure_capture(**self.kwargs)\n", "passes **kwargs"),
        ("        if configure_capture(model=1, eagle=2, ids=3):\n            pass\n", "header"),
        ("        pass\n", "no call of configure_capture under sglang/srt/model_executor"),
    ],
)
def test_a_function_whose_callers_cannot_pass_pp_size_is_not_guarded(tmp_path, caller, why):
    text = "class ModelRunner:\n    def init_backends(self):\n" + caller
    tree = _tree(
        tmp_path,
        {
            "srt/model_executor/__init__.py": "",
            "srt/model_executor/setup.py": SETUP,
            "srt/model_executor/model_runner.py": text,
        },
    )
    found = guard_changes(tree)
    assert not found.changes
    (refused,) = found.unguarded
    assert why in refused.why
    decision = decide_guard(tree, _plan(tree))
    assert decision.verdict is part.Verdict.LEFT_OUT and not decision.changes
    assert decision.reason.startswith("cannot guard a runner call of a capture hook: sglang/")


def test_a_call_on_one_line_is_laid_out_again_the_way_black_would():
    text = (
        "class ModelRunner:\n"
        "    def __init__(self, pp_size):\n"
        "        self.pp_size = pp_size\n\n"
        "    def a(self):\n"
        "        configure(self.model, ids)\n\n"
        "    def b(self):\n"
        "        done = configure(self.model_with_a_long_name, self.ids_with_a_long_name, x=1)\n"
    )
    passed = pass_pp_size(text, "runner.py", frozenset({"configure"}))
    assert not passed.unguarded
    assert "        configure(self.model, ids, pp_size=self.pp_size)\n" in passed.text
    # Over 88 columns on one line, and on one indented line: one argument per line.
    assert (
        "        done = configure(\n"
        "            self.model_with_a_long_name,\n"
        "            self.ids_with_a_long_name,\n"
        "            x=1,\n"
        "            pp_size=self.pp_size,\n"
        "        )\n"
    ) in passed.text
    compile(passed.text, "runner.py", "exec")


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("def f(a, b=2):", "def f(a, b=2, pp_size: int = 1):"),
        ("def f(a, *, b):", "def f(a, *, b, pp_size: int = 1):"),
        ("def f(a, *args, **kwargs):", "def f(a, *args, pp_size: int = 1, **kwargs):"),
        ("def f(a, /, b):", "def f(a, /, b, pp_size: int = 1):"),
        (
            "def f(\n    *,\n    model,\n    **kwargs,\n) -> None:",
            "def f(\n    *,\n    model,\n    pp_size: int = 1,\n    **kwargs,\n) -> None:",
        ),
        (
            "def function_name(parameter_one, parameter_two, parameter_three, param_4):",
            "def function_name(\n"
            "    parameter_one, parameter_two, parameter_three, param_4, pp_size: int = 1\n"
            "):",
        ),
        (
            "def f(a_long_parameter_name, another_long_parameter_name, third_parameter):",
            "def f(\n    a_long_parameter_name,\n    another_long_parameter_name,\n"
            "    third_parameter,\n    pp_size: int = 1,\n):",
        ),
    ],
)
def test_the_parameter_goes_last_the_way_black_lays_it_out(header, expected):
    fn = cst.parse_module(f"{header}\n    pass\n").body[0]
    assert isinstance(fn, cst.FunctionDef)
    code = cst.Module([with_parameter(fn, PARAM_DEF, "")]).code
    assert code == f"{expected}\n    pass\n"


def _blocks(doc: str) -> list[list[str]]:
    """The literal blocks (``::`` then indented lines) of a docstring, lines stripped."""
    blocks = []
    for piece in doc.split("::\n\n")[1:]:
        lines = []
        for line in piece.splitlines():
            if line and not line.startswith("    "):
                break
            if line.strip():
                lines.append(line.strip())
        blocks.append(lines)
    return blocks


def _after(lines: list[str], n: int) -> int:
    """The index of the line after the statement that starts on line ``n``."""
    indent = len(lines[n]) - len(lines[n].lstrip())
    k = n + 1
    while k < len(lines) and (
        not lines[k].strip()
        or len(lines[k]) - len(lines[k].lstrip()) > indent
        or lines[k].lstrip().startswith(")")
    ):
        k += 1
    return k


def _methods_filled(lines: list[str]) -> list[str]:
    """``lines`` with each ``"<METHOD>"`` (how the docstring writes the method a check names)
    replaced by the registry's method of the hook called on the line before."""
    from codemods.upstream.validation.runtime_guard import HOOKS

    filled = []
    for line, preceding in zip(lines, ["", *lines[:-1]], strict=True):
        if '"<METHOD>"' in line:
            (hook,) = [hook for hook in HOOKS if f".{hook}(" in preceding]
            line = line.replace('"<METHOD>"', f'"{HOOKS[hook]}"')
        filled.append(line)
    return filled


@pytest.mark.sglang
@pytest.mark.parametrize(("version", "example"), [("0.5.14", 0), ("0.5.23", 1)])
def test_the_docstrings_before_and_after_are_what_the_guard_does(version, example):
    """Each ``Before::``/``after::`` pair of the module docstring: the before lines are the
    release's, in its order; the after lines are the before lines plus exactly the lines
    the guard adds (imports aside), where it adds them."""
    import difflib
    from itertools import pairwise

    from sglang_support.hook_trees import hook_tree

    from codemods.upstream.validation import runtime_guard

    before, after = _blocks(runtime_guard.__doc__ or "")[2 * example : 2 * example + 2]
    after = _methods_filled(after)
    found = guard_changes(detect_tree(hook_tree(version)))
    old = [line.strip() for c in found.changes for line in (c.old or "").splitlines()]
    new = [line.strip() for c in found.changes for line in c.new.splitlines()]
    added = [
        line[2:]
        for c in found.changes
        for line in difflib.ndiff(
            [x.strip() for x in (c.old or "").splitlines()],
            [x.strip() for x in c.new.splitlines()],
        )
        if line.startswith("+ ") and not line[2:].startswith("from ")
    ]
    shown = [line for line in before if line != "..."]
    assert all(line in old for line in shown), [line for line in shown if line not in old]
    # What the after shows more is what the guard adds; each added line other than the
    # checks (one per method, one shown) is shown: the parameter and the argument.
    assert set(after) - set(before) <= set(added), set(after) - set(before) - set(added)
    assert {line for line in added if not line.startswith("check_pp_aux_capture(")} <= set(after)
    # Each shown added line sits between the lines it sits between in the patched file.
    pairs = set(pairwise(new))
    for previous, line in pairwise(after):
        if (line in added or previous in added) and "..." not in (previous, line):
            assert (previous, line) in pairs, (previous, line)
