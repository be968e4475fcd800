"""``auxcap upstream-patch --series``: the patch as an ordered series of format-patch files.

Fast tests build results by hand (no SGLang tree); the release tests generate the series for
the real 0.5.18-0.5.23 wheels and apply it in order with ``git am -k`` and ``git apply`` on
minimal trees holding the touched files, comparing the outcome with the single patch, and
check that release's PR description (``check_release_body``).
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from sglang_support.generated import release_result

from codemods.cli.commands import cli
from codemods.upstream.edit.change_kinds import (
    RENAME_ROLES,
    RUNTIME,
    TESTS,
    VALIDATION,
    Role,
    model_group,
)
from codemods.upstream.edit.patchfile import FileChange
from codemods.upstream.family.plan import FamilyPlan, FileDecision, ForwardRef
from codemods.upstream.output import series
from codemods.upstream.part import NEEDS_PATCH, ModelState, applies
from codemods.upstream.result import PartAnswer, UpstreamResult
from codemods.upstream.tree.sglang_tree import detect_tree
from tests.gitrepo import IDENTITY, git, isolate_git

PKG = "sglang"
MODELS = f"{PKG}/srt/models"


def _decision(
    file: str,
    kinds: tuple[str, ...],
    forward_file: str | None = None,
    hook: str = "set_eagle3_layers_to_capture",
) -> FileDecision:
    outer = file.removesuffix(".py").title() + "ForCausalLM"
    return FileDecision(
        file,
        (f"{outer}.{hook}",),
        (f"{outer}.{hook}",),
        True,
        "patched",
        ForwardRef(forward_file or file, "Model"),
        kinds,
        ((outer, "Model", (hook,)),),
    )


def _result(tmp_path: Path, changes: list[FileChange], decisions) -> UpstreamResult:
    (tmp_path / PKG / "srt" / "models").mkdir(parents=True, exist_ok=True)
    (tmp_path / PKG / "__init__.py").write_text("")
    (tmp_path / PKG / "srt" / "models" / "__init__.py").write_text("")
    tree = detect_tree(tmp_path)
    plan = FamilyPlan(tmp_path / PKG / "srt" / "models", {d.file: d for d in decisions})
    result = UpstreamResult(tree)
    result.family = plan
    result.changes = changes
    kimi = f"{MODELS}/kimi_linear.py"
    if any(change.path == kimi for change in changes):
        # What the Kimi-Linear part answers when it rewrites the file.
        state = ModelState(kimi, NEEDS_PATCH, ("set_dspark_layers_to_capture",), "Kimi-Linear")
        result.parts.append(PartAnswer("kimi_linear", applies(model=state)))
    return result


def _model(path: str, old: str | None = "a = 1\n", new: str = "a = 2\n") -> FileChange:
    """A rewritten model file, in its family's group as the family patch makes it."""
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    return FileChange(path, old, new, model_group(stem), Role.MODEL)


def _runtime(
    path: str, role: Role, old: str | None = "a = 1\n", new: str = "a = 2\n"
) -> FileChange:
    return FileChange(path, old, new, RUNTIME, role)


def _validation(path: str, old: str = "a = 1\n", new: str = "a = 2\n") -> FileChange:
    return FileChange(path, old, new, VALIDATION, Role.VALIDATION)


def _test(path: str, role: Role, new: str) -> FileChange:
    return FileChange(path, None, new, TESTS, role)


def test_series_orders_runtime_then_model_groups_then_validation(tmp_path):
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",)),
        _decision("qwen3.py", ("entry-callback",), forward_file="qwen2.py"),
        _decision("gemma.py", ("loop-append",)),
        _decision("beam.py", ("after-layer",)),
    ]
    changes = [
        _model(f"{MODELS}/llama.py"),
        _model(f"{MODELS}/qwen2.py"),  # touched as qwen3's forward, no decision of its own
        _model(f"{MODELS}/qwen3.py"),
        _model(f"{MODELS}/qwen3_moe.py"),
        _model(f"{MODELS}/gemma.py"),
        _model(f"{MODELS}/beam.py"),
        _model(f"{MODELS}/kimi_linear.py"),
        _model(f"{MODELS}/brand_new_model.py"),
        _runtime(f"{PKG}/srt/layers/aux_hidden_states.py", Role.RUNTIME_MODULE, None),
        _runtime(f"{PKG}/srt/model_executor/model_runner.py", Role.SIZING),
        _runtime(f"{PKG}/srt/model_executor/cuda_graph_runner.py", Role.SIZING),
        _runtime(f"{PKG}/srt/speculative/spec_info.py", Role.SIZING),
        _validation(f"{PKG}/srt/server_args.py"),
        _validation(f"{PKG}/srt/arg_groups/validation_hook.py"),
        _test(f"{PKG}/test/test_pp_aux_capture.py", Role.INIT_TEST, "a = 2\n"),
    ]
    patches = series.build_series(_result(tmp_path, changes, decisions))
    keys = [patch.key for patch in patches]
    assert keys == [
        "runtime",
        "kimi",
        "llama-qwen-dense",
        "qwen-moe-vl",
        "gemma",
        "other-models",
        "validation",
    ]
    by_key = {patch.key: patch for patch in patches}
    assert by_key["runtime"].paths == [
        f"{PKG}/srt/layers/aux_hidden_states.py",
        f"{PKG}/srt/model_executor/model_runner.py",
        f"{PKG}/srt/model_executor/cuda_graph_runner.py",
        f"{PKG}/srt/speculative/spec_info.py",
    ]
    assert by_key["runtime"].subject.endswith("and size its proxy buffer")
    dense = by_key["llama-qwen-dense"]
    assert dense.paths == [f"{MODELS}/{f}" for f in ("llama.py", "qwen2.py", "qwen3.py")]
    assert sorted(dense.models) == ["llama", "qwen3"]
    assert dense.subject == "[PP] Llama / Qwen dense: carry aux hidden states across stages"
    assert by_key["other-models"].paths == [f"{MODELS}/beam.py", f"{MODELS}/brand_new_model.py"]
    # The test that checks everything together comes with the last patch.
    assert by_key["validation"].paths == [
        f"{PKG}/srt/server_args.py",
        f"{PKG}/srt/arg_groups/validation_hook.py",
        f"{PKG}/test/test_pp_aux_capture.py",
    ]
    # Each body speaks of its own files: the hooks of its models, the forward-only file.
    flat = " ".join(dense.body.split())
    assert "- llama.py: LlamaForCausalLM.set_eagle3_layers_to_capture store the ids" in flat
    assert "- qwen2.py: capture forward of qwen3." in flat
    for patch in patches:
        named = [
            line.split(":", 1)[0][2:] for line in patch.body.splitlines() if line.startswith("- ")
        ]
        assert set(named) <= {p.rsplit("/", 1)[-1] for p in patch.paths}, patch.key
    assert len({patch.body for patch in patches}) == len(patches)
    # every changed file is in exactly one patch
    listed = [path for patch in patches for path in patch.paths]
    assert sorted(listed) == sorted(change.path for change in changes)


def test_models_join_the_family_test_with_the_patch_that_completes_them(tmp_path):
    """llama's capture forward lives in a Gemma file: llama joins the test with that patch."""
    decisions = [
        _decision("llama.py", ("entry-callback",), forward_file="gemma_stack.py"),
        _decision("qwen3.py", ("entry-callback",)),
    ]
    result = _result(tmp_path, [], decisions)
    final = series._family_test_text(result, {"llama", "qwen3"})
    result.changes = [
        _model(f"{MODELS}/llama.py"),
        _model(f"{MODELS}/qwen3.py"),
        _model(f"{MODELS}/gemma_stack.py"),
        _test(f"{PKG}/test/test_pp_aux_capture_family.py", Role.FAMILY_TEST, final),
    ]
    dense, gemma = series.build_series(result)
    assert (dense.key, gemma.key) == ("llama-qwen-dense", "gemma")
    (first,) = [c for c in dense.changes if c.path.endswith("family.py")]
    assert '"qwen3"' in first.new and '"llama"' not in first.new
    assert "this patch adds qwen3 to it" in " ".join(dense.body.split())
    (second,) = [c for c in gemma.changes if c.path.endswith("family.py")]
    assert second.old == first.new and second.new == final
    assert "- gemma_stack.py: capture forward of llama." in gemma.body


def test_family_test_grows_with_each_model_group(tmp_path):
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",)),
    ]
    result = _result(tmp_path, [], decisions)
    final = series._family_test_text(result, {"llama", "qwen3_moe"})
    result.changes = [
        _model(f"{MODELS}/llama.py"),
        _model(f"{MODELS}/qwen3_moe.py"),
        _test(f"{PKG}/test/test_pp_aux_capture_family.py", Role.FAMILY_TEST, final),
    ]
    patches = series.build_series(result)
    assert [p.key for p in patches] == ["llama-qwen-dense", "qwen-moe-vl"]
    first = [c for c in patches[0].changes if c.path.endswith("family.py")]
    second = [c for c in patches[1].changes if c.path.endswith("family.py")]
    assert len(first) == 1 and len(second) == 1
    assert first[0].old is None and '"llama"' in first[0].new and '"qwen3_moe"' not in first[0].new
    assert second[0].old == first[0].new and second[0].new == final


def test_family_test_models_come_with_the_first_patch_of_the_test(tmp_path):
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",)),
    ]
    result = _result(tmp_path, [], decisions)
    final = series._family_test_text(result, {"llama", "qwen3_moe"})
    models = _test(f"{PKG}/test/pp_aux_capture_family_models.py", Role.TEST_MODELS, "M = 1\n")
    result.changes = [
        _model(f"{MODELS}/llama.py"),
        _model(f"{MODELS}/qwen3_moe.py"),
        models,
        _test(f"{PKG}/test/test_pp_aux_capture_family.py", Role.FAMILY_TEST, final),
    ]
    patches = series.build_series(result)
    assert [p.key for p in patches] == ["llama-qwen-dense", "qwen-moe-vl"]
    assert patches[0].paths == [
        f"{MODELS}/llama.py",
        f"{PKG}/test/pp_aux_capture_family_models.py",
        f"{PKG}/test/test_pp_aux_capture_family.py",
    ]
    assert patches[1].paths == [
        f"{MODELS}/qwen3_moe.py",
        f"{PKG}/test/test_pp_aux_capture_family.py",
    ]


def test_checkout_tests_spread_over_the_series_and_the_init_test_comes_last(tmp_path):
    """In a checkout the tests live under test/registered/unit/models/: they are not
    taken for model files; the family test grows with the model patches, and
    test_pp_aux_capture.py, which checks everything together, comes with the last."""
    tests = "test/registered/unit/models"
    root = tmp_path / "checkout"
    for part in ("python/sglang", "python/sglang/srt/models"):
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / "__init__.py").write_text("")
    tree = detect_tree(root)
    assert tree.tests == tests
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3_moe.py", ("entry-gathered",)),
    ]
    plan = FamilyPlan(root / "python/sglang/srt/models", {d.file: d for d in decisions})
    result = UpstreamResult(tree)
    result.family = plan
    final = series._family_test_text(result, {"llama", "qwen3_moe"})
    result.changes = [
        _model("python/sglang/srt/models/llama.py"),
        _model("python/sglang/srt/models/qwen3_moe.py"),
        _runtime("python/sglang/srt/layers/aux_hidden_states.py", Role.RUNTIME_MODULE, None),
        _validation("python/sglang/srt/arg_groups/validation_hook.py"),
        _test(f"{tests}/pp_aux_capture_family_models.py", Role.TEST_MODELS, "M = 1\n"),
        _test(f"{tests}/test_pp_aux_capture_family.py", Role.FAMILY_TEST, final),
        _test(f"{tests}/test_pp_aux_capture.py", Role.INIT_TEST, "T = 1\n"),
    ]
    patches = series.build_series(result)
    assert [p.key for p in patches] == ["runtime", "llama-qwen-dense", "qwen-moe-vl", "validation"]
    assert patches[1].paths == [
        "python/sglang/srt/models/llama.py",
        f"{tests}/pp_aux_capture_family_models.py",
        f"{tests}/test_pp_aux_capture_family.py",
    ]
    assert patches[2].paths == [
        "python/sglang/srt/models/qwen3_moe.py",
        f"{tests}/test_pp_aux_capture_family.py",
    ]
    assert patches[3].paths == [
        "python/sglang/srt/arg_groups/validation_hook.py",
        f"{tests}/test_pp_aux_capture.py",
    ]
    assert "cd test/registered/unit/models &&\n  python3 -m unittest" in patches[1].body


def test_series_mails_apply_with_git_am_as_a_stack(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    repo = tmp_path / "repo"
    (repo / MODELS).mkdir(parents=True)
    (repo / MODELS / "llama.py").write_text("x = 1\n")
    (repo / PKG / "srt" / "server_args.py").write_text("y = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base", env=IDENTITY)
    decisions = [_decision("llama.py", ("entry-callback",))]
    changes = [
        _model(f"{MODELS}/llama.py", "x = 1\n", "x = 2\n"),
        FileChange(f"{PKG}/srt/server_args.py", "y = 1\n", "y = 2\n", VALIDATION, Role.VALIDATION),
        _runtime(f"{PKG}/srt/layers/aux_hidden_states.py", Role.RUNTIME_MODULE, None, "T = 1\n"),
    ]
    patches = series.build_series(_result(tmp_path / "tree", changes, decisions))
    files = series.render_series(patches, "A U Thor <author@example.com>")
    assert list(files) == [
        "0001-runtime.patch",
        "0002-llama-qwen-dense.patch",
        "0003-validation.patch",
    ]
    assert files["0002-llama-qwen-dense.patch"].splitlines()[3] == (
        "Subject: [PP] Llama / Qwen dense: carry aux hidden states across stages"
    )
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    git(repo, "am", "-k", *paths, env=IDENTITY)
    log = git(repo, "log", "--format=%an|%s", "-3").splitlines()
    assert log == [
        f"A U Thor|{patches[2].subject}",
        "A U Thor|[PP] Llama / Qwen dense: carry aux hidden states across stages",
        "A U Thor|[PP] Carry aux hidden states in the PP handoff",
    ]
    assert (repo / MODELS / "llama.py").read_text() == "x = 2\n"
    assert (repo / PKG / "srt/layers/aux_hidden_states.py").read_text() == "T = 1\n"


def test_series_directory_with_another_series_is_refused(tmp_path):
    from codemods.cli.upstream_series import write_series

    stale = tmp_path / "out" / "0009-old.patch"
    stale.parent.mkdir()
    stale.write_text("old")
    with pytest.raises(Exception, match="another series"):
        write_series(tmp_path / "out", {"0001-new.patch": "new"})
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["0009-old.patch"]


# ------------------------------------------------------------------ real releases


def _minimal_tree(path: Path, changes: list[FileChange]) -> Path:
    """A git repository holding the old text of every file the patch touches."""
    for change in changes:
        if change.old is not None:
            target = path / change.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(change.old.encode("utf-8"))
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "--allow-empty", "-m", "release files", env=IDENTITY)
    return path


def _added(old: str | None, new: str) -> list[str]:
    """The lines ``new`` adds to ``old``, stripped."""
    diff = difflib.ndiff((old or "").splitlines(), new.splitlines())
    return [line[2:].strip() for line in diff if line.startswith("+ ")]


def _texts(root: Path, changes: list[FileChange]) -> dict[str, str]:
    return {c.path: (root / c.path).read_text(encoding="utf-8") for c in changes}


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_series_applies_in_order_and_equals_the_single_patch(
    version, sglang_release, tmp_path, monkeypatch
):
    isolate_git(monkeypatch, tmp_path)
    result = release_result(sglang_release(version))
    changes = [c for c in result.changes if c.changed]
    assert changes, version
    patches = series.build_series(result)
    keys = [p.key for p in patches]
    assert keys[0] == "runtime" and len(keys) >= 3, keys
    assert "llama-qwen-dense" in keys, keys
    # The last commit is the validation's: 0.5.18-0.5.20 keep their validation (they
    # refuse speculative decoding with PP), so there it holds the runtime guard alone.
    assert keys[-1] == "validation", keys
    last = patches[-1]
    guard_only = {c.role for c in last.changes if c.changed} == {Role.RUNTIME_GUARD}
    assert guard_only is (version < "0.5.21"), (version, [c.path for c in last.changes])
    if guard_only:
        assert last.subject.startswith("[PP] Refuse aux capture under PP"), last.subject
        assert "configure_aux_hidden_state_capture" in " ".join(last.body.split())
    # model_runner.py, which the sizing and the guard both change: the sizing in its
    # commit, the pp_size= the runner passes configure_aux_hidden_state_capture in the
    # guard's, starting where the sizing left the file.
    runner = [
        (patch, change)
        for patch in patches
        for change in patch.changes
        if change.path.endswith("/model_executor/model_runner.py")
    ]
    assert [patch.key for patch, _ in runner] == [keys[1 if version >= "0.5.21" else 0], keys[-1]]
    (_, sizing), (_, guard) = runner
    assert guard.role is Role.RUNTIME_GUARD and guard.old == sizing.new
    added = _added(guard.old, guard.new)
    assert len(added) == 1 and added[0].startswith("pp_size=self."), added
    assert "configure_aux_hidden_state_capture takes pp_size" in " ".join(last.body.split())
    # Where SGLang relays DSPARK itself, the rename of its relay is a commit of its own,
    # right after the helpers, and holds nothing but the rename.
    assert (keys[1] == series.RENAME) is (version >= "0.5.21"), keys
    for patch in patches:
        roles = {c.role for c in patch.changes}
        assert (patch.key == series.RENAME) is bool(roles & set(RENAME_ROLES)), patch.key
        lines = patch.message().splitlines()
        assert all(len(line) <= 72 for line in lines), (patch.key, lines)
    files = series.render_series(patches, "A U Thor <author@example.com>")
    out = tmp_path / "series"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    wanted = {c.path: c.new for c in changes}

    single = _minimal_tree(tmp_path / "single", changes)
    (tmp_path / "single.patch").write_text(result.patch, encoding="utf-8")
    git(single, "apply", str(tmp_path / "single.patch"))
    assert _texts(single, changes) == wanted

    in_order = _minimal_tree(tmp_path / "apply", changes)
    for name in files:
        git(in_order, "apply", "--check", str(out / name))
        git(in_order, "apply", str(out / name))
    assert _texts(in_order, changes) == wanted

    stack = _minimal_tree(tmp_path / "am", changes)
    git(stack, "am", "-k", *[str(out / name) for name in files], env=IDENTITY)
    assert _texts(stack, changes) == wanted
    subjects = git(stack, "log", "--reverse", "--format=%s", f"-{len(files)}").splitlines()
    assert subjects == [p.subject for p in patches]
    # The PR description and the changes' groups and roles of the same run (checked here
    # so the release is generated once).
    from tests.upstream.edit.test_upstream_change_kinds import check_release_kinds
    from tests.upstream.output.test_upstream_pr_body import check_release_body

    check_release_body(result, version, list(zip(files, patches, strict=True)))
    check_release_kinds(result, version)


@pytest.mark.sglang
@pytest.mark.timeout(600)
def test_cli_series_with_branch_commits_a_stack(sglang_release, tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    release = sglang_release("0.5.23")
    checkout = tmp_path / "sglang"
    shutil.copytree(release / PKG / "srt" / "models", checkout / "python" / PKG / "srt" / "models")
    for name in ("__init__.py", "srt/distributed/__init__.py"):
        target = checkout / "python" / PKG / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release / PKG / name, target)
    git(checkout, "init", "-q", "-b", "main")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "release files", env=IDENTITY)
    body = tmp_path / "PR.md"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(checkout),
            "--models",
            "llama,qwen3_moe",
            "--series",
            str(tmp_path / "series"),
            "--branch",
            "pp-series",
            "--pr-body",
            str(body),
        ],
        catch_exceptions=False,
    )
    assert outcome.exit_code == 0, outcome.output
    names = sorted(p.name for p in (tmp_path / "series").iterdir())
    assert names == ["0001-runtime.patch", "0002-llama-qwen-dense.patch", "0003-qwen-moe-vl.patch"]
    assert git(checkout, "rev-parse", "--abbrev-ref", "HEAD").strip() == "pp-series"
    subjects = git(checkout, "log", "--reverse", "--format=%s", "main..pp-series").splitlines()
    assert subjects == [
        "[PP] Carry aux hidden states in the PP handoff",
        "[PP] Llama / Qwen dense: carry aux hidden states across stages",
        "[PP] Qwen MoE / VL / hybrid: carry aux hidden states across stages",
    ]
    # The commits carry git's identity of the checkout (isolate_git's global one).
    authors = git(checkout, "log", "--format=%an <%ae>", "main..pp-series").splitlines()
    assert authors == ["Test User <test@example.com>"] * 3
    assert git(checkout, "status", "--porcelain").strip() == ""
    text = body.read_text()
    for number, (name, subject) in enumerate(zip(names, subjects, strict=True), start=1):
        assert f"{number}. `{name}`: {subject}\n" in text
    again = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(checkout),
            "--models",
            "llama,qwen3_moe",
            "--series",
            str(tmp_path / "series2"),
        ],
        catch_exceptions=False,
    )
    assert again.exit_code == 0 and "series is empty" in again.output


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(1500)
def test_validate_claims_only_what_it_ran(sglang_release, tmp_path, monkeypatch):
    from sglang_support.env import STUBS_DIR

    release = sglang_release("0.5.23")
    # Without SGLang's CPU stand-ins this Python cannot import the tree: nothing is claimed.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    body = tmp_path / "none.md"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(release),
            "--models",
            "llama",
            "-o",
            str(tmp_path / "p.patch"),
            "--pr-body",
            str(body),
            "--validate",
        ],
        catch_exceptions=False,
    )
    assert outcome.exit_code == 2, outcome.output  # the validation could not run
    assert "not validated: the family test did not run on 2 stages" in outcome.output
    text = body.read_text()
    assert "`--validate` ran nothing" in text and "passed" not in text
    # A package tree: the patch adds no test (they are left out, and said so).
    assert "- [ ] Add unit tests" in text
    assert "are left out of this patch" in text

    monkeypatch.setenv("PYTHONPATH", str(STUBS_DIR))
    # The family test's own processes start warm; its ranks start as they always do.
    from sglang_support import warm

    from codemods.upstream.validation import run_tests

    monkeypatch.setattr(
        run_tests,
        "run_python",
        lambda args, env, cwd, timeout: warm.run(args, env=env, cwd=cwd, timeout=timeout),
    )
    body = tmp_path / "ran.md"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(release),
            "--models",
            "llama",
            "--series",
            str(tmp_path / "s"),
            "--pr-body",
            str(body),
            "--validate",
        ],
        catch_exceptions=False,
    )
    assert outcome.exit_code == 0, outcome.output
    # The console labels the run and each verdict as CPU stand-in results.
    assert "the family test on CPU stand-ins: each patched model built" in outcome.output
    assert "  llama: yes on CPU stand-ins: 2 and 3 stages" in outcome.output
    text = body.read_text()
    # The tests are not in the patch, yet --validate writes them into its copy.
    assert (
        "CPU stand-in results: `auxcap upstream-patch --validate` ran "
        "`test_pp_aux_capture_family.py` (written into the copy)"
    ) in text
    # The family test also drives the Kimi models, whose files the patch renames the relay in.
    assert "- passed on CPU stand-ins (3): kimi_k3, kimi_linear, llama\n" in text
    assert "failed" not in text
    # the tree itself is untouched
    assert "set_pp_aux_capture" not in (release / MODELS / "llama.py").read_text()


def test_a_series_that_does_not_apply_leaves_no_branch(tmp_path, monkeypatch):
    from codemods.deliver.git_basics import GitDeliveryError
    from codemods.deliver.git_series import commit_stack
    from codemods.deliver.on_branch import BranchRequest

    isolate_git(monkeypatch, tmp_path)
    repo = tmp_path / "repo"
    (repo / MODELS).mkdir(parents=True)
    (repo / MODELS / "llama.py").write_text("x = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base", env=IDENTITY)
    head = git(repo, "rev-parse", "HEAD")
    changes = [_model(f"{MODELS}/llama.py", "x = 0\n", "x = 2\n")]  # not what is there
    patches = series.build_series(
        _result(tmp_path / "tree", changes, [_decision("llama.py", ("entry-callback",))])
    )
    paths = []
    for name, text in series.render_series(patches, "A U Thor <author@example.com>").items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    request = BranchRequest("pp-series")
    with pytest.raises(GitDeliveryError, match="does not apply"):
        commit_stack(repo, paths, request, request.preflight(repo))
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(repo, "rev-parse", "HEAD") == head
    assert "pp-series" not in git(repo, "branch", "--list")
    assert git(repo, "status", "--porcelain").strip() == ""


def test_runtime_patch_claims_sizing_only_when_it_sizes_buffers(tmp_path):
    """The shipped helpers and the packer accessor alone size nothing."""
    packer = "class AuxHiddenStatePacker:\n    pass\n"
    helpers = packer.replace("pass", "def captured(self):\n        pass") + "\n\ndef h(): ...\n"
    shipped = [
        _runtime(f"{PKG}/srt/layers/aux_hidden_states.py", Role.RUNTIME_MODULE, packer, helpers)
    ]
    (runtime,) = series.build_series(_result(tmp_path, shipped, []))
    assert runtime.subject == "[PP] Carry aux hidden states in the PP handoff"
    assert "proxy buffer" not in runtime.body
    assert (
        "- aux_hidden_states.py: the helpers the patched hooks and forwards call "
        "(set_pp_aux_capture, pp_aux_outgoing / pp_aux_handoff, pp_aux_collect / "
        "pp_aux_seed, pp_aux_proxy_hidden_size), appended after AuxHiddenStatePacker, which gains "
        "captured() for stages that hand captures on."
    ) in " ".join(runtime.body.split())
    assert "pp_aux_proxy_hidden_size(model)" not in runtime.body
    sized = [*shipped, _runtime(f"{PKG}/srt/model_executor/runner_utils/buffers.py", Role.SIZING)]
    (runtime,) = series.build_series(_result(tmp_path, sized, []))
    assert runtime.subject.endswith("and size its proxy buffer")
    assert "- buffers.py: sizes the aux_hidden_states PP proxy buffer" in " ".join(
        runtime.body.split()
    )
    assert "sizing asks pp_aux_proxy_hidden_size(model)" in " ".join(runtime.body.split())
    old, new = 'k = "dspark_hidden_states"\n', 'k = "aux_hidden_states"\n'
    renamed = [
        *shipped,
        _runtime(f"{PKG}/srt/model_executor/runner_utils/buffers.py", Role.SIZING_RENAME, old, new),
        _runtime(f"{MODELS}/kimi_linear.py", Role.RELAY_RENAME, old, new),
    ]
    # The helper and the rename of SGLang's own DSPARK relay: two commits, in that order.
    runtime, rename = series.build_series(_result(tmp_path, renamed, []))
    assert runtime.paths == [c.path for c in shipped]
    assert rename.key == series.RENAME and "DSPARK relay" in rename.subject
    assert rename.paths == [
        f"{PKG}/srt/model_executor/runner_utils/buffers.py",
        f"{MODELS}/kimi_linear.py",
    ]
    assert "- dspark_hidden_states -> aux_hidden_states" in rename.body
    # A name the release does not have is not said to be renamed.
    assert "get_pp_proxy_dspark_hidden_size" not in rename.body
    for patch in (runtime, rename):
        assert all(len(line) <= 72 for line in patch.message().splitlines()), patch.message()


def test_the_author_is_gits_identity_unless_given(tmp_path, monkeypatch):
    from codemods.deliver.git_series import DEFAULT_AUTHOR, author_of

    isolate_git(monkeypatch, tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert author_of(repo, None) == "Test User <test@example.com>"  # the global identity
    git(repo, "config", "user.name", "Repo Person")
    git(repo, "config", "user.email", "repo@example.com")
    assert author_of(repo, None) == "Repo Person <repo@example.com>"
    assert author_of(repo, "Given <given@example.com>") == "Given <given@example.com>"
    (tmp_path / "bare").mkdir()
    isolate_git(monkeypatch, tmp_path / "bare", identity=False)
    assert author_of(tmp_path / "bare", None) == DEFAULT_AUTHOR


def test_validation_message_names_the_architectures_and_what_stays_refused(tmp_path):
    from codemods.upstream.validation.relax import ValidationResult

    hook = f"{PKG}/srt/arg_groups/validation_hook.py"
    result = _result(
        tmp_path,
        [_model(f"{MODELS}/llama.py"), _validation(hook)],
        [_decision("llama.py", ("entry-callback",))],
    )
    result.validation = ValidationResult(
        result.changes[1], {"LlamaForCausalLM": ("DFLASH", "EAGLE3")}
    )
    (tmp_path / PKG / "srt" / "arg_groups").mkdir(parents=True)
    spec_hook = tmp_path / PKG / "srt" / "arg_groups" / "speculative_hook.py"
    # Without a refusal of DFLASH left in the tree, both are accepted.
    validation = series.build_series(result)[-1]
    assert validation.subject == "[PP] Accept EAGLE3/DFLASH with PP for the patched architectures"
    flat = " ".join(validation.body.split())
    assert (
        "It now accepts EAGLE3 and DFLASH for a model class, resolved as the server "
        "resolves it (get_model_architecture), that lists the convention in "
        "pp_aux_relay_methods" in flat
    )
    assert (
        "These architectures are answered from a table of them and their conventions in "
        "the hook, so the check imports no model code for them" in flat
    )
    assert (
        "any other model class is still refused, with a message naming the class, the "
        "capture method and the reason: its decoder stack is not patched to relay "
        "captures, its constructor refuses PP, it never splits its layers across stages, "
        "or the Transformers backend has no capture hooks." in flat
    )
    assert "check_pp_aux_capture" not in flat  # no runtime guard in this tree
    assert "in the patched files, 1 architecture (capture conventions" in flat
    assert "Still refused" not in flat
    # The release's speculative hook refuses DFLASH with PP: DFLASH stays refused, and why.
    spec_hook.write_text(
        "def _handle_dflash(cfg):\n    if cfg.pp_size != 1:\n        raise ValueError('no')\n"
    )
    validation = series.build_series(result)[-1]
    assert validation.subject == "[PP] Accept EAGLE3 with PP for the patched architectures"
    flat = " ".join(validation.body.split())
    assert "It now accepts EAGLE3 for a model class, resolved as the server" in flat
    assert "LlamaForCausalLM (DFLASH, EAGLE3)" in flat
    assert (
        "Still refused after this series: DFLASH with PP (speculative_hook.py, "
        "_handle_dflash: cfg.pp_size != 1), so check_pipeline_parallel_compat keeps "
        "refusing DFLASH too"
    ) in flat
    assert "EAGLE3 with PP (" not in flat and "accepts EAGLE3 and DFLASH" not in flat
