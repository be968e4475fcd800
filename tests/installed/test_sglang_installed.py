"""``auxcap sglang status|apply|revert`` on the 0.5.23 wheel installed with ``pip install
--no-deps`` into a fresh venv (one per module).

``apply --models llama`` changes exactly the files ``upstream-patch`` would, with the same
bytes, journals them, compiles them with the venv's interpreter; ``status`` reports it; a
second ``apply`` changes nothing; the patched package's llama stages, driven as two real
gloo pipeline stages, hand the last stage what PP=1 does; ``revert`` leaves every byte of
the package as installed; the three commands of ``docs/sglang-installed.md`` run as written.  Foreign edits of llama.py (a flag in the setter, a comment) are patched around and kept; an
edit the rewriters no longer recognise is refused naming the file with every byte left;
a crash between two file writes (an exception no handler catches, and a process killed
with SIGKILL) is rolled back by the next command; a read-only directory
is refused before anything is written.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
from readme_blocks import commands
from sglang_support.env import PROJECT_ROOT, download_wheel, git_apply, sglang_tree
from sglang_support.installed import (
    MODELS,
    RELEASE,
    break_llama,
    drive_llama,
    fresh_venv,
    install_wheel,
    sglang,
    site_packages,
    tree_hashes,
)

from codemods.installed import transaction
from codemods.installed.journal import JOURNAL_NAME
from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]

LLAMA = "sglang/srt/models/llama.py"


class SimulatedCrash(BaseException):
    """Stands for the process dying: no handler of auxcap's catches it."""


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(python, site-packages, hashes of the package as installed)."""
    python = fresh_venv(tmp_path_factory.mktemp("venv") / "v")
    install_wheel(python, download_wheel(RELEASE))
    site = site_packages(python)
    return python, site, tree_hashes(site / "sglang")


@pytest.fixture(scope="module")
def upstream():
    """What ``upstream-patch --models llama`` makes of the release."""
    return generate(sglang_tree(RELEASE), models=[MODELS])


@pytest.fixture()
def installed(venv):
    """The venv, its package as installed again after the test, whatever the test did."""
    yield venv
    python, site, pristine = venv
    package = site / "sglang"
    for folder in package.rglob("*"):
        folder.chmod(folder.stat().st_mode | 0o200)
    (package / JOURNAL_NAME).unlink(missing_ok=True)
    release = sglang_tree(RELEASE)
    for path, digest in tree_hashes(package).items():
        if pristine.get(path) != digest:
            if path in pristine:
                shutil.copyfile(release / "sglang" / path, package / path)
            else:
                (package / path).unlink()


def _args(python, *more):
    return [*more, "--python", str(python)]


def test_apply_status_apply_again_drive_and_revert(installed, upstream):
    python, site, pristine = installed
    package = site / "sglang"
    before = sglang("status", *_args(python))
    assert before.exit_code == 0, before.output
    assert f"sglang {RELEASE} (wheel) at {package}" in before.output
    assert "auxcap's change: not applied" in before.output
    assert "other differences from the release: none" in before.output

    done = sglang("apply", *_args(python, "--models", MODELS))
    assert done.exit_code == 0, done.output
    journal = json.loads((package / JOURNAL_NAME).read_text())
    assert journal["state"] == "applied" and journal["release"] == RELEASE
    assert sorted(journal_path["path"] for journal_path in journal["entries"]) == sorted(
        upstream.changed
    )
    for change in upstream.changes:
        assert (site / change.path).read_bytes() == change.new.encode("utf-8"), change.path
    after = tree_hashes(package)
    changed = {path for path in set(after) | set(pristine) if after.get(path) != pristine.get(path)}
    assert changed == {path.removeprefix("sglang/") for path in upstream.changed} | {JOURNAL_NAME}

    status = sglang("status", *_args(python))
    assert status.exit_code == 0, status.output
    assert "auxcap's change: applied (release 0.5.23, --models llama," in status.output
    assert f"patched by auxcap: {LLAMA}" in status.output
    assert "other differences from the release: none" in status.output

    again = sglang("apply", *_args(python, "--models", MODELS))
    assert again.exit_code == 0, again.output
    assert "nothing to do: auxcap's change is already applied" in again.output
    assert tree_hashes(package) == after

    run = drive_llama(site)
    assert run["ok"], run
    assert run["aux_counts"] == run["expected_counts"] == [3, 3, 3]

    reverted = sglang("revert", *_args(python))
    assert reverted.exit_code == 0, reverted.output
    assert tree_hashes(package) == pristine
    clean = sglang("status", *_args(python))
    assert "not applied" in clean.output and "differences from the release: none" in clean.output
    assert sglang("revert", *_args(python)).exit_code == 0


def test_foreign_edits_are_patched_around_and_kept(installed, upstream):
    python, site, _ = installed
    llama = site / LLAMA
    # As a capture patch might: a flag set in the setter, and a line at the end.
    flag = "            self.capture_aux_hidden_states = True\n"
    text = llama.read_text()
    assert flag in text
    text = text.replace(flag, flag + "            self.spec_capture_enabled = True\n", 1)
    llama.write_text(text + "# spec-capture: local change\n")
    edited = llama.read_bytes()
    marker = site / "sglang" / ".spec_capture_patch.llama.applied"
    marker.write_text("")
    done = sglang("apply", *_args(python, "--models", MODELS))
    assert done.exit_code == 0, done.output
    assert f"patched: {LLAMA} (around another change, kept)" in done.output
    text = llama.read_text()
    assert text.endswith("# spec-capture: local change\n")
    # The hook's flag line is the patch's (the last stage captures), the foreign line kept.
    assert (
        "            self.capture_aux_hidden_states = self.pp_group.is_last_rank\n"
        "            self.spec_capture_enabled = True\n"
    ) in text
    assert "return pp_aux_handoff(" in text
    status = sglang("status", *_args(python))
    assert f"patched by auxcap (around another change): {LLAMA}" in status.output
    assert f"modified: {LLAMA}" in status.output
    assert "added: sglang/.spec_capture_patch.llama.applied" in status.output
    assert sglang("revert", *_args(python)).exit_code == 0
    assert llama.read_bytes() == edited and marker.exists()


def test_unrecognised_foreign_edit_is_refused_and_nothing_written(installed):
    python, site, _ = installed
    break_llama(site / LLAMA)
    before = tree_hashes(site / "sglang")
    done = sglang("apply", *_args(python, "--models", MODELS))
    assert done.exit_code == 1, done.output
    assert f"{LLAMA}: modified since release {RELEASE} and not patched" in done.output
    assert "no `capture_output=aux_hidden_states.capture" in done.output
    assert tree_hashes(site / "sglang") == before


def test_a_tree_patched_without_auxcap_sglang_needs_nothing(installed, upstream):
    python, site, _ = installed
    assert git_apply(site, upstream.patch).returncode == 0
    before = tree_hashes(site / "sglang")
    done = sglang("apply", *_args(python, "--models", MODELS))
    assert done.exit_code == 0, done.output
    assert "nothing to do: the tree already carries the change" in done.output
    assert tree_hashes(site / "sglang") == before
    status = sglang("status", *_args(python))
    assert "auxcap's change: not applied (no journal in the package)" in status.output
    assert (
        f"modified: {LLAMA} (carries auxcap's change, applied without a journal)" in status.output
    )


def test_crash_between_two_writes_is_rolled_back_by_the_next_command(installed, monkeypatch):
    python, site, pristine = installed
    package = site / "sglang"

    def crash(count):
        if count == 2:
            raise SimulatedCrash

    monkeypatch.setattr(transaction, "_after_write", crash)
    with pytest.raises(SimulatedCrash):
        sglang("apply", *_args(python, "--models", MODELS))
    assert json.loads((package / JOURNAL_NAME).read_text())["state"] == "applying"
    assert tree_hashes(package) != pristine  # two files written, the rest not
    monkeypatch.undo()

    status = sglang("status", *_args(python))
    assert status.exit_code == 0, status.output
    assert "found an interrupted applying" in status.output
    # Both files written before the crash are undone (modified ones restored, added
    # ones deleted), however the release splits them.
    assert _rolled_back(status.output) == 2, status.output
    assert tree_hashes(package) == pristine
    # The next apply starts from the release again.
    assert sglang("apply", *_args(python, "--models", MODELS)).exit_code == 0
    assert sglang("revert", *_args(python)).exit_code == 0
    assert tree_hashes(package) == pristine


def _rolled_back(output: str) -> int:
    """The files a roll-back undid, as its message counts them (restored + deleted)."""
    found = re.search(r"rolled back \((\d+) files? restored, (\d+) added files? deleted\)", output)
    assert found, output
    return int(found.group(1)) + int(found.group(2))


KILLED_APPLY = """
import os, signal, sys
from codemods.installed import transaction
def die(count):
    if count == 3:
        os.kill(os.getpid(), signal.SIGKILL)
transaction._after_write = die
from codemods.cli.commands import main
sys.argv = ["auxcap", "sglang", "apply", "--python", sys.argv[1], "--models", "llama"]
main()
"""


def test_a_process_killed_between_writes_is_repaired_by_the_next_apply(installed, upstream):
    python, site, pristine = installed
    package = site / "sglang"
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_APPLY, str(python)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr
    assert json.loads((package / JOURNAL_NAME).read_text())["state"] == "applying"
    done = sglang("apply", *_args(python, "--models", MODELS))
    assert done.exit_code == 0, done.output
    assert "found an interrupted applying" in done.output
    # Killed at the third write: two release files had been replaced, one file added.
    assert _rolled_back(done.output) == 3, done.output
    for change in upstream.changes:
        assert (site / change.path).read_bytes() == change.new.encode("utf-8"), change.path
    assert json.loads((package / JOURNAL_NAME).read_text())["state"] == "applied"
    assert sglang("revert", *_args(python)).exit_code == 0
    assert tree_hashes(package) == pristine


def test_revert_refuses_a_file_changed_since_unless_forced(installed):
    python, site, pristine = installed
    assert sglang("apply", *_args(python, "--models", MODELS)).exit_code == 0
    llama = site / LLAMA
    llama.write_text(llama.read_text() + "# edited after apply\n")
    applied = tree_hashes(site / "sglang")
    refused = sglang("revert", *_args(python))
    assert refused.exit_code == 1
    assert f"nothing was restored (--force restores them anyway):\n  {LLAMA}" in refused.output
    assert tree_hashes(site / "sglang") == applied
    again = sglang("apply", *_args(python, "--models", MODELS))
    assert again.exit_code == 1 and LLAMA in again.output
    forced = sglang("revert", *_args(python, "--force"))
    assert forced.exit_code == 0, forced.output
    assert tree_hashes(site / "sglang") == pristine


def test_read_only_directory_is_refused_before_anything_is_written(installed):
    python, site, pristine = installed
    models = site / "sglang" / "srt" / "models"
    models.chmod(0o555)
    done = sglang("apply", *_args(python, "--models", MODELS))
    models.chmod(0o755)
    assert done.exit_code == 2, done.output
    assert f"{models}: directory is read-only; nothing was written" in done.output
    assert tree_hashes(site / "sglang") == pristine


def test_readme_commands_run_as_written_with_python_from_path(installed, tmp_path):
    python, site, pristine = installed
    lines = commands("Use it today on the SGLang you run")
    assert [line.split("#")[0].split() for line in lines] == [
        ["auxcap", "sglang", "status"],
        ["auxcap", "sglang", "apply"],
        ["auxcap", "sglang", "revert"],
    ]
    auxcap = f'auxcap() {{ {shlex.quote(sys.executable)} -m codemods "$@"; }}\n'
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
    }
    outputs = []
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", auxcap + line],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        assert f"using `python` from PATH: {python.parent / 'python'}" in done.stdout
        outputs.append(done.stdout)
    assert "applied: " in outputs[1] and "patched: sglang/srt/models/qwen3.py" in outputs[1]
    assert "reverted: " in outputs[2]
    assert tree_hashes(site / "sglang") == pristine
