"""Build the upstream patch for one SGLang tree: which files change and how.

``generate(root, models)`` detects the tree (``sglang_tree.py``), rewrites
``srt/models/kimi_linear.py`` (``kimi.py``) and every model file of the capture-hook family
(``family.py``, ``family_patch.py``: the model files, the shipped module and a family test),
relaxes SGLang's server-arg validation for the models it patches (``validation.py``, the
last change), and adds new files:

* the helpers every patched model file calls (``shipped/pp_aux_capture.py``, Kimi-Linear and
  Kimi-K3 included) at ``<package>/srt/distributed/pp_aux_capture.py``: the captures of
  earlier stages ride SGLang's own PP handoff in one ``aux_hidden_states`` entry;
* where a patched forward collects into an ``AuxHiddenStatePacker``, the packer's
  ``captured()`` accessor (``packer_access.py``).

The result's ``patch`` is the git-style patch text (``patchfile.py``), empty when the tree is
already patched.  A tree whose model file already carries DSPARK captures across PP (SGLang
0.5.21+) gets Kimi status ``supported``; with the family patch, its relay entry, width method and
sizing path are renamed for every capture method (``graph_sizing.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from codemods.upstream.edit.change_kinds import KIMI, RUNTIME, Role
from codemods.upstream.edit.parsing import parse_once
from codemods.upstream.edit.patchfile import FileChange, changed_paths, render_patch
from codemods.upstream.family.patch import (
    GLUE_MODULE,
    family_changes,
    plan_for_tree,
    render_glue,
    shipped_tests,
)
from codemods.upstream.family.plan import FamilyPlan
from codemods.upstream.kimi import k3 as kimi_k3
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.sizing import packer_access
from codemods.upstream.tree.sglang_tree import SGLangTree, detect_tree
from codemods.upstream.validation.relax import ValidationResult, validation_changes

KIMI_NAME = "kimi_linear"
K3_NAME = kimi_k3.NAME
#: Status when the tree has no Kimi-Linear file and only the family is patched.
FAMILY_ONLY = "family_only"


class MissingModelFile(FileNotFoundError):
    """The tree has no file at the path the rewriter targets."""


@dataclass
class UpstreamResult:
    tree: SGLangTree
    #: Kimi-Linear's status: ``kimi.NEEDS_PATCH`` | ``kimi.PATCHED`` | ``kimi.SUPPORTED``, or
    #: ``FAMILY_ONLY`` (no Kimi-Linear file, or not asked for).
    kimi_status: str
    model_path: str
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: What the capture-hook family part decided per model file (None: not asked for).
    family: FamilyPlan | None = None
    #: Kimi-K3's status (``kimi.NEEDS_PATCH`` ...; None: no such file or not asked for).
    k3_status: str | None = None
    #: What the server-arg validation part decided (None: not run).
    validation: ValidationResult | None = None
    #: File name -> text of the CPU tests shipped for the family (in a checkout's patch;
    #: left out of a package tree's, see ``tests_left_out``).
    tests: dict[str, str] = field(default_factory=dict)
    #: The folder ``generate(tests_dir=...)`` wrote ``tests`` to (None: not asked for).
    tests_dir: Path | None = None

    @property
    def tests_left_out(self) -> bool:
        """The tree has no test folder, so the patch does not carry ``tests``."""
        return bool(self.tests) and self.tree.tests is None

    @property
    def tests_note(self) -> str | None:
        """Where the shipped tests went, when not (only) into the patch."""
        if not self.tests:
            return None
        names = ", ".join(sorted(self.tests))
        if self.tests_left_out:
            where = (
                f"written to {self.tests_dir} instead"
                if self.tests_dir
                else "pass --tests-dir DIR to write them to a folder"
            )
            return (
                f"tests left out of the patch: {self.tree.describe()} has no test "
                f"folder and tests are not written into the package ({names}); "
                f"{where}"
            )
        if self.tests_dir:
            return f"tests also written to {self.tests_dir} ({names})"
        return None

    @property
    def patch(self) -> str:
        return render_patch(self.changes)

    @property
    def changed(self) -> list[str]:
        return changed_paths(self.changes)

    @property
    def glue_path(self) -> str:
        return self.tree.module_path(GLUE_MODULE)

    @property
    def packer_path(self) -> str:
        return self.tree.module_path(packer_access.MODULE)

    def shipped_changes(self) -> list[FileChange]:
        """The helpers module, unless a change for its path is already in ``changes``."""
        if any(change.path == self.glue_path for change in self.changes):
            return []
        return [
            FileChange(
                self.glue_path,
                self.tree.read_text(self.glue_path),
                render_glue(),
                RUNTIME,
                Role.RUNTIME_MODULE,
            )
        ]


def generate(
    root: str | Path, models: list[str] | None = None, tests_dir: str | Path | None = None
) -> UpstreamResult:
    """Raises ``TreeError``, ``MissingModelFile``, ``kimi.UnrecognisedShape`` or
    ``ValueError`` (a name in ``models`` that has no capture hook in the tree).

    ``models`` (file stems, e.g. ``["llama", "kimi_linear"]``) restricts the patch; by
    default it covers Kimi-Linear and every recognised model of the capture-hook family
    (``family.py``).  The shipped module (``pp_aux_capture.py``) is added once.

    The family's CPU tests go into a checkout's patch (``test/registered/unit/models/``);
    a package tree's patch leaves them out (a note says so).  ``tests_dir``: also write
    them to that folder (created if needed), whatever the tree.
    """
    with parse_once():
        return _generate(detect_tree(root), models, tests_dir)


def _generate(
    tree: SGLangTree, models: list[str] | None, tests_dir: str | Path | None
) -> UpstreamResult:
    wanted = None if models is None else list(dict.fromkeys(models))
    with_kimi = wanted is None or KIMI_NAME in wanted
    with_k3 = wanted is None or K3_NAME in wanted
    family_names = None if wanted is None else [n for n in wanted if n not in (KIMI_NAME, K3_NAME)]
    model_path = tree.module_path(kimi.MODULE)
    source = tree.read_text(model_path) if with_kimi else None

    family = None
    if family_names is None or family_names:
        family = plan_for_tree(tree, family_names)
    family_changes_ = family_changes(tree, family) if family is not None else []

    # Without a Kimi-Linear file the family alone decides, already patched or not; only a
    # tree with no model file of either kind (or Kimi-Linear asked for by name) is an error.
    has_family = family is not None and bool(family.decisions)
    if with_kimi and source is None and (wanted is not None or not has_family):
        raise MissingModelFile(f"{tree.file(model_path)}: Kimi-Linear model file not found")
    if source is not None:
        new_source, analysis = kimi.rewrite(source, str(tree.file(model_path)))
        result = UpstreamResult(tree, analysis.status, model_path, notes=list(analysis.notes))
    else:
        result = UpstreamResult(tree, FAMILY_ONLY, model_path)
        if with_kimi:
            result.notes.append(f"{model_path} not found; Kimi-Linear not patched")
    result.family = family
    if source is not None and result.kimi_status != kimi.SUPPORTED:
        result.changes = [FileChange(model_path, source, new_source, KIMI, Role.MODEL)]
        result.changes += result.shipped_changes()
    if with_k3:
        result.changes += _kimi_k3_changes(tree, result, required=wanted is not None)
    present = {change.path for change in result.changes}
    result.changes += [change for change in family_changes_ if change.path not in present]
    # Server-arg validation last: it accepts what the model changes above make safe.
    validation = validation_changes(tree, family)
    result.validation = validation
    result.notes += list(validation.notes)
    if validation.change is not None and validation.change.changed:
        result.changes.append(validation.change)
    if family is not None:
        result.tests = shipped_tests(family, tree)
        family.release_trees()
    if tests_dir is not None and result.tests:
        result.tests_dir = write_tests(result.tests, tests_dir)
    return result


def write_tests(tests: dict[str, str], folder: str | Path) -> Path:
    """Write ``tests`` (file name -> text) into ``folder``; the folder."""
    path = Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    for name, text in tests.items():
        with open(path / name, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return path


def _kimi_k3_changes(tree: SGLangTree, result: UpstreamResult, required: bool) -> list[FileChange]:
    """The Kimi-K3 model file (``kimi_k3.py``) and, if nothing added it yet, the helpers
    module; ``required``: the file was asked for by name, so its absence is an error."""
    path = tree.module_path(kimi_k3.MODULE)
    source = tree.read_text(path)
    if source is None:
        if required:
            raise MissingModelFile(f"{tree.file(path)}: Kimi-K3 model file not found")
        return []
    try:
        new_source, analysis = kimi_k3.rewrite(source, str(tree.file(path)))
    except kimi.UnrecognisedShape as err:
        if required:
            raise
        result.notes.append(f"{path} not patched: {err}")
        return []
    result.k3_status = analysis.status
    result.notes += list(analysis.notes)
    if analysis.status == kimi.SUPPORTED:
        return []
    return [FileChange(path, source, new_source, KIMI, Role.MODEL), *result.shipped_changes()]
