"""``auxcap sglang`` without a release wheel: apply, status and revert of a small package
tree in a git repository with torch hidden (the base install); errors: an interpreter
without sglang, no ``python`` on PATH, an interpreter that does not run, a program that
is not Python (one that exits, writes without end or never answers) or a Python that fails, a release auxcap was never tried on (said once, generated
like any other), an unreadable journal, a journal of another release, a package another
command holds; the RECORD hashes; status lines that agree with the journal after an edit;
a file that does not compile with the target interpreter rolled back with every other
one; an interrupted apply rolled back."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from sglang_support.installed import fresh_venv, sglang, site_packages, tree_hashes

from codemods.installed import interpreter, transaction
from codemods.installed import journal as jr
from codemods.installed.errors import Refused
from codemods.installed.locate import TRIED_RELEASES
from codemods.installed.pristine import record_hashes
from codemods.upstream.tree.sglang_tree import detect_tree
from tests.gitrepo import IDENTITY, git, isolate_git
from tests.test_installs import PROJECT_ROOT, hide_modules
from tests.upstream.test_upstream_rerun import family_checkout

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """A fresh venv without sglang."""
    return fresh_venv(tmp_path_factory.mktemp("bare") / "v")


@pytest.fixture()
def fake(tmp_path):
    """A fresh venv importing a stand-in sglang 0.4.9 package tree through a ``.pth``."""
    python = fresh_venv(tmp_path / "v")
    package = tmp_path / "tree" / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('sglang must not run')\n")
    (package / "_version.py").write_text("__version__ = version = '0.4.9'\n")
    (site_packages(python) / "tree.pth").write_text(f"{tmp_path / 'tree'}\n")
    return python, package


def test_an_interpreter_without_sglang_is_an_error(bare):
    done = sglang("status", "--python", str(bare))
    assert done.exit_code == 2
    assert "sglang is not installed for this interpreter" in done.output
    assert str(bare.parent) in done.output


def test_default_interpreter_is_python_on_path_and_named(bare, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(bare)
    monkeypatch.setenv("PATH", str(bin_dir))
    done = sglang("status")
    assert f"using `python` from PATH: {bin_dir / 'python'}" in done.output
    assert done.exit_code == 2 and "sglang is not installed" in done.output
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    done = sglang("apply")
    assert done.exit_code == 2
    assert "no interpreter named `python` on PATH; name one with --python" in done.output


def test_an_interpreter_that_does_not_run_is_an_error(tmp_path):
    done = sglang("revert", "--python", str(tmp_path / "missing" / "python"))
    assert done.exit_code == 2 and "cannot run this interpreter" in done.output


def test_a_release_never_tried_is_said_once_and_generated_from_its_files(fake):
    python, package = fake
    before = {p: p.read_bytes() for p in package.rglob("*") if p.is_file()}
    untried = (
        f"release 0.4.9: not one auxcap has been tried on ({TRIED_RELEASES[0]} to "
        f"{TRIED_RELEASES[-1]}); the change is generated from this tree's files the same way"
    )
    done = sglang("apply", "--python", str(python))
    # The stand-in tree has no models folder: nothing to generate from (unreadable input).
    assert done.exit_code == 2, done.output
    assert "srt/models: not a directory; nothing was written" in done.output
    assert done.output.count(untried) == 1
    assert "nothing was written" in done.output
    status = sglang("status", "--python", str(python))
    assert status.exit_code == 0, status.output
    assert "sglang 0.4.9 (package tree)" in status.output
    assert status.output.count(untried) == 1
    assert "other differences from the release: cannot tell" in status.output
    assert {p: p.read_bytes() for p in package.rglob("*") if p.is_file()} == before


def test_a_release_before_the_capture_hooks_is_refused_in_one_sentence(fake):
    """0.4.0 (a model file, no capture hook anywhere): apply refuses (exit 1, the README's
    "a check failed"), in one sentence that names the folder, and writes nothing."""
    python, package = fake
    (package / "_version.py").write_text("__version__ = version = '0.4.0'\n")
    models = package / "srt" / "models"
    models.mkdir()
    (models / "llama.py").write_text("class LlamaForCausalLM:\n    pass\n")
    before = {p: p.read_bytes() for p in package.rglob("*") if p.is_file()}
    done = sglang("apply", "--python", str(python))
    assert done.exit_code == 1, done.output
    assert done.output.splitlines()[-1] == (
        f"auxcap: refused: {models}: no model file defines a capture hook, so there is "
        "nothing to patch; nothing was written"
    )
    assert {p: p.read_bytes() for p in package.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("program", "said"),
    [
        ("true", "it exited 0 without the answer"),
        ("false", "it exited 1 without the answer"),
        ("ls", "it exited 2 without the answer"),
        ("yes", "it exited 1 without the answer"),
    ],
)
def test_a_program_that_is_not_python_is_named_as_such(program, said):
    path = shutil.which(program)
    assert path is not None
    done = sglang("status", "--python", path)
    assert done.exit_code == 2, done.output
    assert done.output.strip().splitlines() == [
        f"auxcap: error: {path} is not a Python interpreter (asked to run a short Python "
        f"program, {said}); name a Python interpreter with --python"
    ]


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "not-python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_a_program_that_writes_without_end_is_stopped_and_named(tmp_path):
    path = _script(tmp_path, "exec yes")
    done = sglang("apply", "--python", path)
    assert done.exit_code == 2, done.output
    assert f"{path} is not a Python interpreter" in done.output
    assert "wrote more than 1048576 bytes without answering" in done.output
    assert "y\ny" not in done.output


def test_a_program_that_never_answers_is_stopped_and_named(tmp_path, monkeypatch):
    monkeypatch.setattr(interpreter, "TIMEOUT", 1.0)
    path = _script(tmp_path, "exec sleep 600")
    done = sglang("revert", "--python", path)
    assert done.exit_code == 2, done.output
    assert f"{path} is not a Python interpreter" in done.output
    assert "gave no answer within 1 seconds" in done.output


def test_a_python_that_fails_is_named_with_its_last_traceback_line(tmp_path):
    path = _script(tmp_path, f"exec {sys.executable} -c 'import auxcap_no_such_module'")
    done = sglang("status", "--python", path)
    assert done.exit_code == 2, done.output
    assert done.output.strip().splitlines() == [
        f"auxcap: error: {path}: the Python interpreter failed (exit 1): "
        "ModuleNotFoundError: No module named 'auxcap_no_such_module'"
    ]


def test_an_unreadable_journal_is_an_error_naming_it(fake):
    python, package = fake
    (package / jr.JOURNAL_NAME).write_text("{not json")
    done = sglang("revert", "--python", str(python))
    assert done.exit_code == 2
    assert f"{package / jr.JOURNAL_NAME}: unreadable journal" in done.output


def test_record_hashes_read_csv_and_decode_urlsafe_base64_without_padding():
    data = b"print('x')\n"
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = (
        f"sglang/a.py,sha256={digest},{len(data)}\n"
        f'"sglang/E=1,N=2.json",sha256={digest},{len(data)}\n'
        "sglang/__pycache__/a.cpython-311.pyc,,\nother/b.py,sha256=AAAA,1\n"
    )
    expected = hashlib.sha256(data).hexdigest()
    assert record_hashes(record, "sglang/") == {
        "sglang/a.py": expected,
        "sglang/E=1,N=2.json": expected,
    }


def test_a_file_that_does_not_compile_rolls_every_file_back(fake, tmp_path):
    python, package = fake
    tree = detect_tree(package.parent)
    good, bad = "sglang/srt/good.py", "sglang/srt/new/bad.py"
    (package / "srt" / "good.py").write_bytes(b"x = 1\n")
    entries = [
        jr.Entry.of(good, b"x = 1\n", b"x = 2\n", None),
        jr.Entry.of(bad, None, b"def (:\n", None),
    ]
    journal = jr.Journal(
        state=jr.APPLYING,
        release="0.4.9",
        tree_root=str(tree.root),
        package=str(package),
        models=None,
        entries=entries,
    )
    with pytest.raises(Refused) as refused:
        transaction.write_all(
            tree, package, journal, {good: b"x = 2\n", bad: b"def (:\n"}, str(python)
        )
    assert f"{package / 'srt' / 'new' / 'bad.py'}: SyntaxError" in str(refused.value)
    assert "rolled back 2 files" in str(refused.value)
    assert (package / "srt" / "good.py").read_bytes() == b"x = 1\n"
    assert not (package / "srt" / "new").exists()
    assert not (package / jr.JOURNAL_NAME).exists()


def test_recover_rolls_back_an_interrupted_apply_and_keeps_foreign_bytes(fake):
    python, package = fake
    tree = detect_tree(package.parent)
    for name in ("a.py", "b.py", "c.py"):
        (package / "srt" / name).write_bytes(b"old\n")
    entries = [
        jr.Entry.of(f"sglang/srt/{n}", b"old\n", b"new\n", None) for n in ("a.py", "b.py", "c.py")
    ]
    journal = jr.Journal(
        state=jr.APPLYING,
        release="0.4.9",
        tree_root=str(tree.root),
        package=str(package),
        models=None,
        entries=entries,
    )
    jr.save(package, journal)
    (package / "srt" / "a.py").write_bytes(b"new\n")  # written before the crash
    (package / "srt" / "c.py").write_bytes(b"someone else\n")
    journal_data = json.loads((package / jr.JOURNAL_NAME).read_text())
    assert journal_data["state"] == "applying"
    _, done = transaction.recover(tree, package)
    assert done.restored == ["sglang/srt/a.py"] and done.left == ["sglang/srt/c.py"]
    assert (package / "srt" / "a.py").read_bytes() == b"old\n"
    assert (package / "srt" / "c.py").read_bytes() == b"someone else\n"
    assert not (package / jr.JOURNAL_NAME).exists()


def test_a_journal_of_another_release_is_never_restored(fake):
    python, package = fake
    tree = detect_tree(package.parent)
    (package / "srt" / "a.py").write_bytes(b"reinstalled\n")
    journal = jr.Journal(
        state=jr.APPLIED,
        release="0.5.20",
        tree_root=str(tree.root),
        package=str(package),
        models=None,
        entries=[jr.Entry.of("sglang/srt/a.py", b"old\n", b"new\n", None)],
    )
    jr.save(package, journal)
    for args in (["revert"], ["revert", "--force"]):
        done = sglang(*args, "--python", str(python))
        assert done.exit_code == 1, done.output
        assert "a journal of sglang 0.5.20, but the package is 0.4.9" in done.output
    assert (package / "srt" / "a.py").read_bytes() == b"reinstalled\n"
    status = sglang("status", "--python", str(python))
    assert "journal of release 0.5.20, not this package's" in status.output


def test_one_command_at_a_time_per_package(fake):
    python, package = fake
    fd = os.open(package, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = sglang("status", "--python", str(python))
        assert done.exit_code == 1
        assert f"{package}: another auxcap command is working on this package" in done.output
    finally:
        os.close(fd)
    assert sglang("status", "--python", str(python)).exit_code == 0


def test_apply_status_revert_on_a_package_tree_in_git_without_torch(tmp_path, monkeypatch):
    isolate_git(monkeypatch, tmp_path)
    root = family_checkout(tmp_path / "tree")
    (root / "sglang" / "_version.py").write_text("__version__ = version = '0.5.23'\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release", env=IDENTITY)
    python = fresh_venv(tmp_path / "v")
    (site_packages(python) / "tree.pth").write_text(f"{root}\n")
    hidden = hide_modules(tmp_path / "hidden", "torch")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(PROJECT_ROOT)])}
    pristine = tree_hashes(root / "sglang")

    def auxcap(*args):
        return subprocess.run(
            [sys.executable, "-m", "codemods", "sglang", *args, "--python", str(python)],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
        )

    model = root / "sglang" / "srt" / "models" / "family_llama_like.py"
    model.chmod(0o444)
    done = auxcap("apply")
    assert done.returncode == 2
    assert f"{model}: file is read-only; nothing was written" in done.stderr
    assert tree_hashes(root / "sglang") == pristine
    model.chmod(0o644)
    done = auxcap("apply")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "patched: sglang/srt/models/family_llama_like.py" in done.stdout
    assert "added: sglang/srt/layers/aux_hidden_states.py" in done.stdout
    status = auxcap("status")
    assert "auxcap's change: applied (release 0.5.23, every model," in status.stdout
    assert "sglang 0.5.23 (package tree)" in status.stdout
    assert "other differences from the release: none (git status of" in status.stdout
    assert "nothing to do" in auxcap("apply").stdout
    # An edit after apply: the status lines say what the journal says of the file.
    applied = model.read_bytes()
    model.write_bytes(applied + b"# edited after apply\n")
    status = auxcap("status")
    rel = "sglang/srt/models/family_llama_like.py"
    assert "auxcap's change: applied, files changed since" in status.stdout
    assert f"changed since auxcap applied it: {rel}" in status.stdout
    assert (
        f"modified: {rel} (in auxcap's journal, changed since auxcap applied its change)"
    ) in status.stdout
    assert "without a journal" not in status.stdout
    model.write_bytes(applied)
    other = auxcap("apply", "--models", "family_llama_like")
    assert other.returncode == 1
    assert (
        "auxcap's change is applied for every model, not --models family_llama_like; "
        "revert it first"
    ) in other.stderr
    done = auxcap("revert")
    assert done.returncode == 0, done.stdout + done.stderr
    assert tree_hashes(root / "sglang") == pristine
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    unknown = auxcap("apply", "--models", "no_such_model")
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "no_such_model" in unknown.stderr and "nothing was written" in unknown.stderr
    assert tree_hashes(root / "sglang") == pristine
