"""Without a release wheel: the copy of another project's patch read from the package
(``installed/foreign``), and ``auxcap sglang apply`` on top of such a patch in a package
tree in git (the other patch named, its edits kept, a file it changed where no part of
auxcap's change applies left alone, its bytes back after ``revert``); the steps ``apply``
reports while it works (``installed/phases``), drawn on a terminal only
(``cli/progress.PhaseBar``); ``revert --force`` naming each local change it discards."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from sglang_support.foreign_patch import apply_recorded, make_patch
from sglang_support.installed import fresh_venv, sglang, site_packages, tree_hashes

from codemods.cli.progress import PhaseBar
from codemods.installed import actions, foreign
from tests.gitrepo import IDENTITY, git, isolate_git
from tests.upstream.test_upstream_rerun import family_checkout

PACKAGE_TREE = SimpleNamespace(tree=SimpleNamespace(package="sglang"))
CHECKOUT_TREE = SimpleNamespace(tree=SimpleNamespace(package="python/sglang"))
PATCH = """\
diff --git a/python/sglang/srt/a.py b/python/sglang/srt/a.py
--- a/python/sglang/srt/a.py
+++ b/python/sglang/srt/a.py
@@ -1,2 +1,3 @@
 x = 1
+y = 2
 z = 3
diff --git a/python/sglang/srt/new.py b/python/sglang/srt/new.py
new file mode 100644
--- /dev/null
+++ b/python/sglang/srt/new.py
@@ -0,0 +1 @@
+w = 4
--- a/sglang/srt/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-v = 5
"""


def test_a_recorded_patch_names_its_files_as_tree_paths():
    patch = foreign.parse(PACKAGE_TREE, "sglang/.sink_patch.applied", PATCH)
    assert patch is not None and patch.name == "sink_patch"
    assert patch.files == {
        "sglang/srt/a.py": foreign.MODIFIES,
        "sglang/srt/new.py": foreign.ADDS,
        "sglang/srt/gone.py": foreign.DELETES,
    }
    assert patch.describe() == (
        "sink_patch (its copy: sglang/.sink_patch.applied; it adds 1, deletes 1, modifies 1 files)"
    )
    in_checkout = foreign.parse(CHECKOUT_TREE, "python/sglang/.x.patch", PATCH)
    assert in_checkout is not None and set(in_checkout.files) == {
        "python/sglang/srt/a.py",
        "python/sglang/srt/new.py",
        "python/sglang/srt/gone.py",
    }
    assert foreign.owner([patch], "sglang/srt/new.py") is patch
    assert foreign.owner([patch], "sglang/.sink_patch.applied") is patch
    assert foreign.owner([patch], "sglang/srt/other.py") is None


def test_files_that_are_not_patches_of_the_package_are_not_recorded_patches():
    assert foreign.parse(PACKAGE_TREE, "sglang/.marker.applied", "") is None
    assert foreign.parse(PACKAGE_TREE, "sglang/notes.txt", "--- a list\n+++ more\n") is None
    elsewhere = PATCH.replace("sglang/", "other/")
    assert foreign.parse(PACKAGE_TREE, "sglang/.other.applied", elsewhere) is None


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_phase_bar_draws_steps_with_counts_on_a_terminal_only():
    terminal = _Terminal()
    bar = PhaseBar(stream=terminal, delay=0, interval=0.01)
    bar.phase("generating the change")
    time.sleep(0.1)
    bar.phase("writing the files", 3)
    bar.advance()
    bar.advance()
    time.sleep(0.1)
    bar.close()
    drawn = terminal.getvalue()
    assert "\rgenerating the change (0 s)" in drawn.replace("\x1b[K", "")
    assert "writing the files 2/3 (" in drawn
    assert drawn.endswith("\r\x1b[K")  # wiped when done
    piped = io.StringIO()
    bar = PhaseBar(stream=piped, delay=0, interval=0.01)
    bar.phase("generating the change")
    time.sleep(0.05)
    bar.close()
    assert piped.getvalue() == ""


class _Recorder:
    def __init__(self) -> None:
        self.steps: list[list] = []

    def phase(self, label: str, total: int | None = None) -> None:
        self.steps.append([label, total, 0])

    def advance(self) -> None:
        self.steps[-1][2] += 1


def test_apply_reports_its_steps_and_counts_every_file_written(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "tree")
    (root / "sglang" / "_version.py").write_text("__version__ = version = '0.5.23'\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release", env=IDENTITY)
    python = fresh_venv(tmp_path / "v")
    (site_packages(python) / "tree.pth").write_text(f"{root}\n")
    recorder = _Recorder()
    messages: list[str] = []
    outcome = actions.apply(str(python), None, messages.append, recorder)
    assert outcome.changed, messages
    labels = [step[0] for step in recorder.steps]
    assert labels == [
        "generating the change from the model files",
        "comparing the files with the release",
        "writing the files",
        f"compiling {len(outcome.files)} files with {python}",
    ]
    assert recorder.steps[2][1:] == [len(outcome.files), len(outcome.files)]
    actions.revert(str(python), False, messages.append)


RUNNER = "sglang/srt/model_executor/model_runner.py"
RUNNER_TEXT = """class ModelRunner:
    def __init__(self, is_draft_worker=False):
        self.is_draft_worker = is_draft_worker
"""
LLAMA_LIKE = "sglang/srt/models/family_llama_like.py"
OTHER_EDITS = {
    # A file of the CUDA-graph sizing path, on a tree that has no such path: no part of
    # auxcap's change applies to it, so another patch's edit there is no conflict.
    RUNNER: ("        self.is_draft_worker = is_draft_worker\n", "        self.sink = None\n"),
    LLAMA_LIKE: (
        "            self.capture_aux_hidden_states = True\n",
        "            self.sink_enabled = True\n",
    ),
}


def test_apply_goes_on_top_of_a_recorded_patch_in_a_git_tree(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "tree")
    (root / "sglang" / "_version.py").write_text("__version__ = version = '0.5.14'\n")
    (root / RUNNER).write_text(RUNNER_TEXT)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release", env=IDENTITY)
    python = fresh_venv(tmp_path / "v")
    (site_packages(python) / "tree.pth").write_text(f"{root}\n")
    patch = make_patch(root, OTHER_EDITS, {"sglang/srt/sink.py": "SINK = None\n"})
    apply_recorded(root, patch, "sink_patch")
    theirs = tree_hashes(root / "sglang")
    args = ("--python", str(python))

    done = sglang("apply", *args)
    assert done.exit_code == 0, done.output
    assert f"patched: {LLAMA_LIKE} (on top of sink_patch's change, kept)" in done.output
    assert RUNNER not in done.output
    text = (root / LLAMA_LIKE).read_text()
    assert "            self.sink_enabled = True\n" in text and "set_pp_aux_capture(" in text
    status = sglang("status", *args)
    assert status.exit_code == 0, status.output
    assert (
        "another patch: sink_patch (its copy: sglang/.sink_patch.applied; it adds 1, "
        "modifies 2 files), all of them differ from the release"
    ) in status.output
    assert f"patched by auxcap (on top of sink_patch's change): {LLAMA_LIKE}" in status.output
    assert f"modified: {RUNNER} (by sink_patch)" in status.output
    assert "added: sglang/.sink_patch.applied (the copy sink_patch keeps of itself)" in (
        status.output
    )
    assert sglang("revert", *args).exit_code == 0
    assert tree_hashes(root / "sglang") == theirs


def test_revert_force_names_each_local_change_it_discards(tmp_path, monkeypatch):
    """``revert --force`` restores a file edited since ``apply`` like any other, and says
    that the edit was discarded; a file it restores untouched keeps the plain label."""
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "tree")
    (root / "sglang" / "_version.py").write_text("__version__ = version = '0.5.23'\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release", env=IDENTITY)
    pristine = tree_hashes(root / "sglang")
    python = fresh_venv(tmp_path / "v")
    (site_packages(python) / "tree.pth").write_text(f"{root}\n")
    args = ("--python", str(python))
    assert sglang("apply", *args).exit_code == 0
    edited = root / LLAMA_LIKE
    edited.write_text(edited.read_text() + "# a local fix\n")
    done = sglang("revert", "--force", *args)
    assert done.exit_code == 0, done.output
    lines = [line.removeprefix("auxcap: ") for line in done.output.splitlines()]
    assert f"  restored (local change discarded): {LLAMA_LIKE}" in lines
    assert f"  restored: {LLAMA_LIKE}" not in lines
    restored = [line for line in lines if line.startswith("  restored: ")]
    assert restored and all(LLAMA_LIKE not in line for line in restored)
    assert any("(1 local change discarded); journal removed" in line for line in lines)
    assert tree_hashes(root / "sglang") == pristine
