"""``auxcap sglang`` on an editable-style checkout: the 0.5.23 release laid out as
``checkout/python/sglang``, a git repository with one commit, on a fresh venv's path through
a ``.pth`` file (one per module).

``apply --models llama`` changes exactly the files ``upstream-patch`` would for that
checkout (its new tests under ``test/registered/unit/models/``), ``status`` reads the release from
``sglang/_version.py`` and the other differences from git; the patched checkout's llama
stages match PP=1 on two gloo stages; a second ``apply`` changes nothing; ``revert`` leaves
``git status`` clean and every byte as committed.  An edit the rewriters no longer recognise
is refused naming the file, found through git, with every byte left as it was.
"""

from __future__ import annotations

import pytest
from sglang_support.env import sglang_tree
from sglang_support.installed import (
    MODELS,
    RELEASE,
    break_llama,
    drive_llama,
    editable_checkout,
    fresh_venv,
    sglang,
    tree_hashes,
)

from codemods.installed.journal import JOURNAL_NAME
from codemods.upstream.generate import generate
from tests.gitrepo import git

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]

LLAMA = "python/sglang/srt/models/llama.py"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """(python, checkout root)."""
    base = tmp_path_factory.mktemp("editable")
    python = fresh_venv(base / "venv")
    root = editable_checkout(sglang_tree(RELEASE), base / "checkout", python)
    return python, root


def _state(root):
    return (
        tree_hashes(root / "python"),
        git(root, "status", "--porcelain"),
        sorted(p.name for p in root.iterdir()),
    )


def test_apply_status_drive_and_revert_on_a_checkout(checkout):
    python, root = checkout
    upstream = generate(root, models=[MODELS])
    assert upstream.tree.kind == "checkout"
    pristine = _state(root)
    status = sglang("status", "--python", str(python))
    assert status.exit_code == 0, status.output
    assert f"sglang {RELEASE} (editable checkout) at {root / 'python' / 'sglang'}" in (
        status.output
    )
    assert "other differences from the release: none (git status of" in status.output

    done = sglang("apply", "--python", str(python), "--models", MODELS)
    assert done.exit_code == 0, done.output
    for change in upstream.changes:
        assert (root / change.path).read_bytes() == change.new.encode("utf-8"), change.path
    changed = set(git(root, "status", "--porcelain", "--untracked-files=all").split())
    changed.discard("M")
    changed.discard("??")
    assert changed == set(upstream.changed) | {f"python/sglang/{JOURNAL_NAME}"}
    assert "test/registered/unit/models/test_pp_aux_capture_family.py" in changed

    status = sglang("status", "--python", str(python))
    assert "auxcap's change: applied (release 0.5.23, --models llama," in status.output
    assert f"patched by auxcap: {LLAMA}" in status.output
    assert "other differences from the release: none" in status.output
    again = sglang("apply", "--python", str(python), "--models", MODELS)
    assert again.exit_code == 0 and "already applied" in again.output

    run = drive_llama(root / "python")
    assert run["ok"], run
    assert run["aux_counts"] == run["expected_counts"] == [3, 3, 3]

    reverted = sglang("revert", "--python", str(python))
    assert reverted.exit_code == 0, reverted.output
    assert _state(root) == pristine
    assert not (root / "test").exists()


def test_unrecognised_edit_found_through_git_is_refused(checkout):
    python, root = checkout
    break_llama(root / LLAMA)
    try:
        before = _state(root)
        status = sglang("status", "--python", str(python))
        assert f"modified: {LLAMA}" in status.output
        done = sglang("apply", "--python", str(python), "--models", MODELS)
        assert done.exit_code == 1, done.output
        assert f"{LLAMA}: modified since release {RELEASE} and not patched" in done.output
        assert _state(root) == before
    finally:
        git(root, "checkout", "--", LLAMA)
