"""The ``--branch`` delivery of the two commands, so that the CLI only parses and prints.

``migrate_on_branch``: run the caller codemods on a new branch, commit the rewritten files,
re-check them, and optionally write a PR description and ``git format-patch`` output.
``upstream_on_branch``: apply the generated SGLang patch with ``git apply`` on a new branch
and commit the files it touches, with the same extras.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from codemods.callers.records import FileResult, Status
from codemods.deliver import git_branch, messages
from codemods.deliver.git_branch import DeliveryResult, GitDeliveryError
from codemods.deliver.messages import PatchedFile
from codemods.deliver.recheck import recheck_python_files
from codemods.sources import fileio

if TYPE_CHECKING:
    import git

    from codemods.callers.engine import Selection
    from codemods.callers.options import TransformOptions

#: ``engine.run``'s shape: (paths, options, write) -> FileResult per file.
RunEngine = Callable[[Sequence[str], "TransformOptions", bool], Iterator[FileResult]]


@dataclass(frozen=True)
class BranchRequest:
    """What the user asked for with ``--branch`` and its companion options."""

    branch: str
    base: str | None = None
    author: str | None = None
    allow_dirty: bool = False
    pr_body: Path | None = None
    patch_dir: Path | None = None
    #: ``upstream-patch -o FILE``: the patch, written before the branch is made.
    patch_file: Path | None = None

    @property
    def outputs(self) -> tuple[Path, ...]:
        """Files the run writes itself: left untracked by an earlier run, they do not
        make the work tree dirty."""
        return tuple(path for path in (self.pr_body, self.patch_file) if path is not None)

    def preflight(self, repo_dir: Path | str):
        """Every check the delivery makes before it changes anything (``git_branch.preflight``)."""
        return git_branch.preflight(
            repo_dir, self.branch, self.base, self.author, self.allow_dirty, self.outputs
        )

    def commit(self, repo, apply_change, message) -> DeliveryResult:
        """The branch with one commit of what ``apply_change`` wrote (``repo``: the preflight's
        repository; nothing but read-only listing may have run since)."""
        return git_branch.deliver_on_branch(
            git_branch.work_tree(repo).resolve(),
            self.branch,
            self.base,
            apply_change,
            message,
            author=self.author,
            allow_dirty=self.allow_dirty,
            outputs=self.outputs,
            checked=repo,
        )


@dataclass(frozen=True)
class Delivered:
    delivery: DeliveryResult
    verification: messages.Verification
    pr_body: Path | None = None
    patches: tuple[Path, ...] = ()
    results: tuple[FileResult, ...] = field(default=(), repr=False)

    def summary(self) -> str:
        lines = [self.delivery.summary()]
        if self.pr_body is not None:
            lines.append(f"PR description: {self.pr_body}")
        if self.patches:
            lines.append(f"Patches ({len(self.patches)}, apply with `git am`):")
            lines += [f"  {path}" for path in self.patches]
        return "\n".join(lines)


class UnprocessableFiles(GitDeliveryError):
    """Some files could not be read, parsed or rewritten: nothing was committed."""


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fileio.write_output_atomic(path, text.encode("utf-8"))


def _common_repo_dir(paths: Iterable[str | os.PathLike[str]]) -> Path:
    """The folder to look for the repository from: the first path (or its folder)."""
    first = Path(next(iter(paths), "."))
    return first if first.is_dir() else first.parent


def _check_same_repository(root: Path, paths: Iterable[str | os.PathLike[str]]) -> None:
    for raw in paths:
        resolved = Path(raw).resolve()
        try:
            resolved.relative_to(root)
        except ValueError:
            raise GitDeliveryError(
                f"{raw} is not inside the repository {root}; --branch commits to one repository"
            ) from None


def _finish(
    delivery: DeliveryResult,
    request: BranchRequest,
    verification: messages.Verification,
    body: Callable[[messages.Verification], str],
    results: Sequence[FileResult] = (),
) -> Delivered:
    pr_path = None
    patches: tuple[Path, ...] = ()
    if delivery.commit is not None:
        if request.pr_body is not None:
            pr_path = Path(request.pr_body)
            write_text_atomic(pr_path, body(verification))
        if request.patch_dir is not None:
            patches = tuple(
                git_branch.format_patch(
                    delivery.repo_root, delivery.base_commit, delivery.branch, request.patch_dir
                )
            )
    return Delivered(delivery, verification, pr_path, patches, tuple(results))


def files_git_sees(
    repo: git.Repo, paths: Sequence[str], selection: Selection | None = None
) -> list[str]:
    """The source files under ``paths`` (as the engine collects them) minus those git ignores.

    A branch holds only files git tracks or would track, so ignored files (build output,
    generated code) are never rewritten by a ``--branch`` run.
    """
    from codemods.callers.engine import Selection, collect_files

    selection = selection or Selection()
    unreadable: dict[str, str] = {}
    files = collect_files(
        paths,
        selection.include,
        selection.exclude,
        selection.force_exclude,
        unreadable=unreadable,
    )
    if unreadable:  # a branch never holds a migration of part of the tree
        raise UnprocessableFiles(
            "cannot process " + "; ".join(f"{path}: {why}" for path, why in unreadable.items())
        )
    if not files:
        return []
    root = git_branch.work_tree(repo).resolve()
    relative = {str(Path(path).resolve().relative_to(root)): path for path in files}
    ignored = repo.git.execute(
        ["git", "check-ignore", "--stdin", "-z"],
        istream=fileio.temp_stream(b"".join(os.fsencode(name) + b"\0" for name in relative)),
        with_exceptions=False,
        strip_newline_in_stdout=False,
    )
    skip = {name for name in ignored.split("\0") if name}
    return [path for name, path in relative.items() if name not in skip]


def migrate_on_branch(
    paths: Sequence[str],
    options: TransformOptions,
    request: BranchRequest,
    policies: Mapping[str, str],
    run: RunEngine | None = None,
    selection: Selection | None = None,
) -> Delivered:
    """``auxcap migrate PATH... --branch NAME`` (``selection``: the --include/--exclude globs).

    Files the engine cannot process make the whole delivery fail (nothing committed, the
    repository as it was), so a branch never holds half a migration.
    """
    if run is None:
        from codemods.callers import engine  # the engine is only needed when migrating

        run = engine.run
    paths = list(paths) or ["."]
    repo = request.preflight(_common_repo_dir(paths))
    root = git_branch.work_tree(repo).resolve()
    _check_same_repository(root, paths)
    files = files_git_sees(repo, paths, selection)
    results: list[FileResult] = []

    def apply_change(_root: Path) -> list[Path]:
        results.extend(run(files, options, True) if files else ())
        failed = [result for result in results if result.status is Status.FAILED]
        if failed:
            raise UnprocessableFiles(
                "cannot process " + "; ".join(f"{result.path}: {result.error}" for result in failed)
            )
        # Engine paths are relative to the current directory, not to the repository root.
        return [
            Path(os.path.abspath(result.path))
            for result in results
            if result.status is Status.CHANGED
        ]

    delivery = request.commit(
        repo, apply_change, lambda files: messages.migrate_commit_message(results, policies, root)
    )
    verification = messages.Verification()
    if delivery.commit is not None:
        verification = recheck_python_files(root, delivery.files)
        committed = [str(root / path) for path in delivery.files if (root / path).is_file()]
        again = list(run(committed, options, False))
        idempotent = all(result.status is Status.UNCHANGED for result in again)
        verification = messages.Verification(
            verification.rechecked, verification.failures, idempotent
        )
    return _finish(
        delivery,
        request,
        verification,
        lambda checked: messages.migrate_pr_body(results, delivery, policies, checked),
        results,
    )


def _directory_option(repo_root: Path, tree_root: Path) -> list[str]:
    """``--directory=DIR`` when the patched tree is a folder inside the repository."""
    relative = tree_root.resolve().relative_to(repo_root.resolve()).as_posix()
    return [] if relative == "." else [f"--directory={relative}"]


def patch_paths(repo_root: Path, patch_text: str, tree_root: Path | None = None) -> list[str]:
    """The repository paths a git-style patch touches (``git apply --numstat``), no writes.

    ``tree_root``: the folder the patch's paths are relative to (default: the repository root).
    """
    repo = git_branch.open_repository(repo_root)
    root = git_branch.work_tree(repo)
    directory = _directory_option(root, tree_root or root)
    listing = repo.git.execute(
        ["git", "apply", "--numstat", "-z", *directory],
        istream=fileio.temp_stream(patch_text.encode("utf-8")),
        strip_newline_in_stdout=False,
    )
    paths: list[str] = []
    fields = listing.split("\0")
    index = 0
    while index < len(fields):
        record = fields[index]
        if not record:
            index += 1
            continue
        added_deleted_path = record.split("\t", 2)
        if len(added_deleted_path) == 3 and added_deleted_path[2]:
            paths.append(added_deleted_path[2])
            index += 1
        else:  # a rename: "added\tdeleted\t" then the old and the new path
            paths += [fields[index + 1], fields[index + 2]]
            index += 3
    return paths


def upstream_on_branch(
    sglang_root: Path | str,
    patch_text: str,
    patched: Sequence[messages.PatchedFile],
    request: BranchRequest,
    regenerate: Callable[[Path], str] | None = None,
    detail: str = "",
    description: str | None = None,
    title: str = messages.UPSTREAM_TITLE,
    message: str | None = None,
) -> Delivered:
    """``auxcap upstream-patch SGLANG_ROOT --branch NAME``: ``git apply`` the patch and commit.

    ``regenerate(root)`` re-runs the generator on the patched tree; an empty patch means the
    change is idempotent.  ``message``: the commit message (the generator's, from the same
    result as ``description``); None: one listing ``patched``.
    """
    repo = request.preflight(sglang_root)
    root = git_branch.work_tree(repo).resolve()
    tree_root = Path(sglang_root).resolve()

    def apply_change(work_tree: Path) -> list[str]:
        if not patch_text.strip():
            return []
        touched = patch_paths(work_tree, patch_text, tree_root)
        try:
            repo.git.execute(
                ["git", "apply", "--whitespace=nowarn", *_directory_option(work_tree, tree_root)],
                istream=fileio.temp_stream(patch_text.encode("utf-8")),
            )
        except Exception as error:
            detail_text = getattr(error, "stderr", "") or str(error)
            raise GitDeliveryError(f"the patch does not apply: {detail_text}") from error
        return touched

    delivery = request.commit(
        repo,
        apply_change,
        lambda files: message or messages.upstream_commit_message(patched, detail, title),
    )
    verification = messages.Verification()
    if delivery.commit is not None:
        verification = recheck_python_files(root, delivery.files)
        if regenerate is not None:
            verification = messages.Verification(
                verification.rechecked, verification.failures, not regenerate(root).strip()
            )
    return _finish(
        delivery,
        request,
        verification,
        lambda checked: messages.upstream_pr_body(patched, delivery, checked, detail, description),
    )


def upstream_generated_on_branch(
    sglang_root: str | Path,
    request: BranchRequest,
    output: str | None = None,
    models: list[str] | None = None,
    result=None,
) -> Delivered:
    """``auxcap upstream-patch SGLANG_ROOT --branch NAME``: generate (unless ``result``, the
    run's generation of the tree, is given), apply, commit.

    The PR description is the generator's own (motivation, design, traffic, test plan)
    followed by the patched-file table, the verification and how to revert; the commit
    message comes from the same result (:mod:`codemods.upstream.output.branch_message`).
    """
    from codemods.upstream.generate import CannotApply, MissingModelFile, generate
    from codemods.upstream.output.branch_message import commit_message
    from codemods.upstream.output.pr_body import render
    from codemods.upstream.output.result_facts import file_summary
    from codemods.upstream.tree.sglang_tree import TreeError

    if output:
        request = replace(request, patch_file=Path(output))
    request.preflight(sglang_root)
    if result is None:
        try:
            result = generate(sglang_root, models=models)
        except (TreeError, MissingModelFile, CannotApply, ValueError) as error:
            raise UnprocessableFiles(str(error)) from error
    patched = [
        PatchedFile(change.path, file_summary(result, change), added=change.is_new_file)
        for change in result.changes
        if change.changed
    ]
    patch = result.patch
    if output:
        write_text_atomic(Path(output), patch)
    description = render(result) if patch else None
    title = messages.UPSTREAM_TITLE
    if description and description.startswith("# "):
        title = description.splitlines()[0][2:].strip()
    return upstream_on_branch(
        result.tree.root,
        patch,
        patched,
        request,
        regenerate=lambda _root: generate(sglang_root, models=models).patch,
        description=description,
        title=title,
        message=commit_message(result) if patch else None,
    )
