"""``auxcap upstream-patch --stack DIR``: the patch as a stack of PRs in merge order.

The release tests generate each release once (``release_result``), write its stack with the
CLI's own writer into a folder, and apply it PR by PR with ``git am -k`` on a git repository
of the release tree: every Python file a PR touches compiles after it (``py_compile``), each
PR changes at most 600 lines outside tests (counted from its patch files), the validation
comes last, each ``PR.md`` lists only its own files, and the tree after the last PR equals
the tree the single patch gives.  The CLI test makes one branch per PR with ``--branch``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from sglang_support.generated import release_result

from codemods.cli.commands import cli
from codemods.cli.upstream_stack import run_stack
from codemods.upstream.edit.change_kinds import Role
from codemods.upstream.output import stack
from codemods.upstream.output.pr_body import SECTIONS
from codemods.upstream.output.stack_body import compile_failures
from tests.gitrepo import IDENTITY, git, isolate_git

LIMIT = stack.MAX_LINES
_DIFF = re.compile(r"^diff --git a/(\S+) b/")


def _is_test_path(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.startswith("test_") or "/test/" in f"/{path}"


def _code_lines(folder: Path) -> int:
    """Lines added or removed outside tests, read off the PR's patch files."""
    count, path = 0, None
    for patch in sorted(folder.glob("*.patch")):
        in_diff = False
        for line in patch.read_text(encoding="utf-8").splitlines():
            match = _DIFF.match(line)
            if match:
                path, in_diff = match.group(1), True
                continue
            if line == "-- ":  # the format-patch signature
                in_diff = False
            if not in_diff or line.startswith(("+++ ", "--- ")) or path is None:
                continue
            if line[:1] in "+-" and not _is_test_path(path):
                count += 1
    return count


def _paths(folder: Path) -> list[str]:
    found = []
    for patch in sorted(folder.glob("*.patch")):
        for line in patch.read_text(encoding="utf-8").splitlines():
            match = _DIFF.match(line)
            if match and match.group(1) not in found:
                found.append(match.group(1))
    return found


class Applied:
    """A release's stack, written and applied PR by PR."""

    def __init__(self, version, result, prs, out, repo, compiled, stack_tree, single_tree):
        self.version, self.result, self.prs, self.out, self.repo = (
            version,
            result,
            prs,
            out,
            repo,
        )
        self.compiled, self.stack_tree, self.single_tree = compiled, stack_tree, single_tree


@pytest.fixture(scope="module", params=["0.5.23", "0.5.14"])
def applied(request, sglang_release, tmp_path_factory):
    version = request.param
    base = tmp_path_factory.mktemp(f"stack-{version}")
    with pytest.MonkeyPatch.context() as patch:
        isolate_git(patch, base)
        release = sglang_release(version)
        result = release_result(release)
        out = base / "stack"
        assert run_stack(result, str(release), str(out)) == 0
        prs = stack.build_stack(result)
        repo = base / "sglang"
        shutil.copytree(release, repo)
        git(repo, "init", "-q", "-b", "main")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "release tree", env=IDENTITY)
        (base / "single.patch").write_text(result.patch, encoding="utf-8")
        git(repo, "checkout", "-q", "-b", "single")
        git(repo, "apply", str(base / "single.patch"))
        git(repo, "add", "-A")
        single_tree = git(repo, "write-tree").strip()
        git(repo, "reset", "-q", "--hard")
        git(repo, "clean", "-qfd")
        git(repo, "checkout", "-q", "-b", "stack", "main")
        compiled = {}
        for pr in prs:
            folder = out / pr.name
            patches = sorted(str(p) for p in folder.glob("*.patch"))
            git(repo, "am", "-q", "-k", *patches, env=IDENTITY)
            python = [p for p in _paths(folder) if p.endswith(".py")]
            done = subprocess.run(
                [sys.executable, "-m", "py_compile", *python],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            compiled[pr.name] = (done.returncode, done.stderr, len(python))
        stack_tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
        yield Applied(version, result, prs, out, repo, compiled, stack_tree, single_tree)


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
def test_stack_applied_in_order_equals_the_single_patch(applied):
    assert len(applied.prs) >= 4, [pr.name for pr in applied.prs]
    assert applied.stack_tree == applied.single_tree
    for name, (code, stderr, count) in applied.compiled.items():
        assert code == 0, (name, stderr)
        assert count, name  # every PR touches Python files, and they were compiled


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
def test_stack_order_and_sizes(applied):
    prs, out = applied.prs, applied.out
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert folders == [pr.name for pr in prs]
    kinds = [pr.kind for pr in prs]
    assert kinds[0] == stack.HELPERS
    assert kinds[1] == stack.GUARD
    # Kinds never go back: helpers, guard, fixes, families, dead code, validation.
    ranks = [stack.KIND_ORDER.index(kind) for kind in kinds]
    assert ranks == sorted(ranks), kinds
    validation = [pr for pr in prs if any(c.role is Role.VALIDATION for c in pr.changes)]
    if applied.version == "0.5.23":
        assert validation == [prs[-1]], kinds
    else:  # 0.5.14 keeps its validation: nothing to relax there.
        assert validation == [], kinds
    for pr in prs:
        lines = _code_lines(out / pr.name)
        assert lines == pr.code_lines, pr.name
        assert lines <= LIMIT, (pr.name, lines)
        if pr.kind == stack.FIXES:
            assert [c.role for c in pr.changes] == [Role.FIX], pr.name
        if pr.kind == stack.DEAD:
            decisions = applied.result.family.decisions
            names = [path.rsplit("/", 1)[-1] for path in pr.paths]
            assert all(not decisions[n].patched and decisions[n].dead_returns for n in names)
    # Guard changes only in the guard's PR.
    guards = [pr.name for pr in prs if any(c.role is Role.RUNTIME_GUARD for c in pr.changes)]
    assert guards == [prs[1].name]
    index = (out / "STACK.md").read_text()
    for number, pr in enumerate(prs, start=1):
        assert f"| {number} | `{pr.name}` | {pr.title} |" in index
        assert f"| {pr.code_lines} | {pr.test_lines} | {len(pr.paths)} |" in index


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
def test_each_pr_body_names_only_its_own_files(applied):
    prs, out = applied.prs, applied.out
    every = set(applied.result.changed)
    names = [pr.name for pr in prs]
    for index, pr in enumerate(prs):
        body = (out / pr.name / "PR.md").read_text()
        positions = [body.index(section) for section in SECTIONS]
        assert positions == sorted(positions), pr.name
        own = set(_paths(out / pr.name))
        assert own == set(pr.paths)
        named = {path for path in every if path in body}
        assert named == own, (pr.name, sorted(named ^ own))
        listed = re.findall(r"^- `([^`]+)`: \d+ changed line", body, re.M)
        assert set(listed) == own, pr.name
        mentioned = set(re.findall(r"#(\d\d-[\w-]+)", body))
        assert mentioned <= set(names[:index]), (pr.name, mentioned)
        first = body.split("\n\n", 2)[1]
        if index:
            assert first.startswith("Depends on "), first
            assert names[index - 1] in first or not pr.depends, first
        for dependency in pr.depends:
            assert f"#{dependency}" in first


@pytest.mark.sglang
@pytest.mark.timeout(600)
def test_cli_stack_with_branch_makes_one_branch_per_pr(applied, tmp_path, monkeypatch):
    if applied.version != "0.5.23":
        pytest.skip("one release is enough for the branches")
    isolate_git(monkeypatch, tmp_path)
    checkout = tmp_path / "wt"
    git(applied.repo, "worktree", "add", "-q", str(checkout), "main")
    out = tmp_path / "stack"
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(checkout),
            "--models",
            "llama,qwen3_moe,qwen3_vl",
            "--stack",
            str(out),
            "--branch",
            "pp",
        ],
        catch_exceptions=False,
    )
    assert outcome.exit_code == 0, outcome.output
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(folders) >= 4, folders
    branches = [f"pp-{name}" for name in folders]
    listed = git(checkout, "branch", "--list", "pp-*", "--format=%(refname:short)").split()
    assert sorted(listed) == branches
    parent = git(checkout, "rev-parse", "main").strip()
    for branch, folder in zip(branches, folders, strict=True):
        commits = len(list((out / folder).glob("*.patch")))
        assert git(checkout, "rev-list", "--count", f"{parent}..{branch}").strip() == str(commits)
        assert git(checkout, "rev-parse", f"{branch}~{commits}").strip() == parent
        parent = git(checkout, "rev-parse", branch).strip()
    assert git(checkout, "status", "--porcelain").strip() == ""
    # The same folder again: the stack is written over itself; another stack's folders
    # left there are refused.
    git(checkout, "checkout", "-q", "main")
    (out / "99-stale").mkdir()
    again = CliRunner().invoke(
        cli, ["upstream-patch", str(checkout), "--models", "llama", "--stack", str(out)]
    )
    assert again.exit_code == 2 and "99-stale" in again.output


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(900)
def test_a_small_limit_splits_prs_by_file(applied):
    limit = 50
    prs = stack.build_stack(applied.result, limit=limit)  # checks the chain and the end
    assert len(prs) > len(applied.prs)
    for pr in prs:
        code = [c for c in pr.changes if not stack.is_test(c)]
        assert pr.code_lines <= limit or len(code) == 1, pr.name  # a file is never cut
        assert not compile_failures(pr), pr.name
        for commit in pr.commits:
            named = {p for p in applied.result.changed if p.rsplit("/", 1)[-1] in commit.body}
            # A commit message names its own files (and, at most, capture forwards of
            # its models that an earlier commit changed).
            earlier = {p for q in prs[: prs.index(pr)] for p in q.paths}
            assert named <= set(commit.paths) | earlier, (pr.name, named - set(commit.paths))


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.3", "0.5.9", "0.5.18", "0.5.21"])
def test_stack_of_other_releases(version, sglang_release):
    result = release_result(sglang_release(version))
    prs = stack.build_stack(result)  # raises when the PRs do not chain or end as the patch
    assert len(prs) >= 3, [pr.name for pr in prs]
    assert prs[0].kind == stack.HELPERS and prs[1].kind == stack.GUARD
    for pr in prs:
        assert pr.code_lines <= LIMIT, pr.name
        assert not compile_failures(pr), pr.name


@pytest.mark.sglang
@pytest.mark.timeout(600)
def test_stack_series_and_patch_come_from_one_generation(sglang_release, tmp_path, monkeypatch):
    import codemods.cli.upstream_patch as upstream_patch

    release = sglang_release("0.5.14")
    result = release_result(release)
    calls = []

    def generate(root, **_options):
        calls.append(root)
        return result

    monkeypatch.setattr(upstream_patch, "generate", generate)
    outcome = CliRunner().invoke(
        cli,
        [
            "upstream-patch",
            str(release),
            "--stack",
            str(tmp_path / "stack"),
            "--series",
            str(tmp_path / "series"),
            "-o",
            str(tmp_path / "single.patch"),
        ],
        catch_exceptions=False,
    )
    assert outcome.exit_code == 0, outcome.output
    assert calls == [str(release)]
    assert (tmp_path / "single.patch").read_text(encoding="utf-8") == result.patch
    series_files = sorted(p.name for p in (tmp_path / "series").glob("*.patch"))
    stacked = sorted((tmp_path / "stack").glob("[0-9][0-9]-*/*.patch"))
    assert series_files and len(stacked) >= len(stack.build_stack(result))
    assert (tmp_path / "stack" / "STACK.md").is_file()


def _checkout_result(tmp_path, model_lines: int = 1):
    """A hand-made result of a checkout: runtime, two families (Qwen3's forward in
    qwen2.py), the runtime guard, the validation, and the shipped tests."""
    from codemods.upstream.edit.change_kinds import RUNTIME, TESTS, VALIDATION, model_group
    from codemods.upstream.edit.patchfile import FileChange
    from codemods.upstream.family.plan import FamilyPlan
    from codemods.upstream.output import series
    from codemods.upstream.result import UpstreamResult
    from codemods.upstream.tree.sglang_tree import detect_tree
    from tests.upstream.output.test_upstream_series import _decision

    tests = "test/registered/unit/models"
    root = tmp_path / "checkout"
    for part in ("python/sglang", "python/sglang/srt/models"):
        (root / part).mkdir(parents=True, exist_ok=True)
        (root / part / "__init__.py").write_text("")
    decisions = [
        _decision("llama.py", ("entry-callback",)),
        _decision("qwen3.py", ("entry-callback",), forward_file="qwen2.py"),
        _decision("qwen3_moe.py", ("entry-gathered",)),
    ]
    result = UpstreamResult(detect_tree(root))
    result.family = FamilyPlan(root / "python/sglang/srt/models", {d.file: d for d in decisions})
    final = series._family_test_text(result, {"llama", "qwen3", "qwen3_moe"})
    body = "".join(f"a{n} = {n}\n" for n in range(model_lines))

    def model(stem: str) -> FileChange:
        path = f"python/sglang/srt/models/{stem}.py"
        return FileChange(path, "a = 1\n", body, model_group(stem), Role.MODEL)

    def runtime(stem: str, role: Role, group: str = RUNTIME) -> FileChange:
        return FileChange(f"python/sglang/srt/{stem}.py", "a = 1\n", "a = 2\n", group, role)

    result.changes = [
        model("llama"),
        model("qwen2"),
        model("qwen3"),
        model("qwen3_moe"),
        runtime("layers/aux_hidden_states", Role.RUNTIME_MODULE),
        runtime("model_executor/model_runner", Role.RUNTIME_GUARD, VALIDATION),
        runtime("arg_groups/validation_hook", Role.VALIDATION, VALIDATION),
        FileChange(
            f"{tests}/pp_aux_capture_family_models.py", None, "M = 1\n", TESTS, Role.TEST_MODELS
        ),
        FileChange(f"{tests}/test_pp_aux_capture_family.py", None, final, TESTS, Role.FAMILY_TEST),
        FileChange(f"{tests}/test_pp_aux_capture.py", None, "T = 1\n", TESTS, Role.INIT_TEST),
    ]
    return result, tests


def test_checkout_stack_orders_the_guard_second_and_keeps_tests_with_their_prs(tmp_path):
    from codemods.upstream.output.stack_body import render_pr

    result, tests = _checkout_result(tmp_path)
    prs = stack.build_stack(result)
    assert [pr.kind for pr in prs] == ["helpers", "guard", "family", "family", "validation"]
    assert prs[1].paths == ["python/sglang/srt/model_executor/model_runner.py"]
    assert f"{tests}/test_pp_aux_capture_family.py" in prs[2].paths
    assert f"{tests}/test_pp_aux_capture_family.py" in prs[3].paths
    assert prs[-1].paths == [
        "python/sglang/srt/arg_groups/validation_hook.py",
        f"{tests}/test_pp_aux_capture.py",
    ]
    assert prs[-1].depends == [pr.name for pr in prs[:-1]]
    body = render_pr(prs[2], prs, result)
    assert "- [x] Add unit tests" in body
    assert "python3 -m unittest test_pp_aux_capture_family" in body
    assert "Depends on #01-helpers. Stacked on #02-runtime-guard" in body
    guard = render_pr(prs[1], prs, result)
    assert "- [ ] Add unit tests" in guard and "ships no test" in guard


def test_a_family_over_the_limit_is_split_keeping_a_models_files_together(tmp_path):
    result, tests = _checkout_result(tmp_path, model_lines=40)
    prs = stack.build_stack(result, limit=100)
    dense = [pr for pr in prs if pr.slug.startswith("llama-qwen-dense")]
    assert [pr.slug for pr in dense] == ["llama-qwen-dense-1", "llama-qwen-dense-2"]
    names = [[p.rsplit("/", 1)[-1] for p in pr.paths] for pr in dense]
    # qwen3.py and its capture forward's file, qwen2.py, stay in one PR; the family test
    # (with its stand-in models) comes with the last part, when the family is complete.
    assert names == [
        ["llama.py"],
        [
            "qwen2.py",
            "qwen3.py",
            "pp_aux_capture_family_models.py",
            "test_pp_aux_capture_family.py",
        ],
    ]
    assert all(pr.code_lines <= 100 for pr in prs)
    assert "llama.py" in dense[0].commits[0].body and "qwen" not in dense[0].commits[0].body
    assert "Models: qwen3." in " ".join(dense[1].commits[0].body.split())
