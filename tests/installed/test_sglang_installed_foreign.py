"""``auxcap sglang`` on the 0.5.14 wheel (a release before 0.5.18) after another project's
patch of the same package, applied first with ``patch -p2`` and recorded in the package
(``sglang_support.foreign_patch``: the logits processor, the scheduler, the model runner,
the server arguments, llama's capture setter and a new module).

``status`` names the other patch and the differences it explains; ``apply`` (every model,
no ``--models``) goes on top: it changes the files the generator changes on the release,
with the release's result where the other patch left a file alone, keeps every line of
the other patch, and says so; ``status`` then names both changes; ``revert`` gives back the
other patch's bytes exactly.
"""

from __future__ import annotations

import pytest
from sglang_support.env import download_wheel, sglang_tree
from sglang_support.foreign_patch import EDITS, NEW_MODULE, apply_recorded, capture_sink_patch
from sglang_support.installed import fresh_venv, install_wheel, sglang, site_packages, tree_hashes

from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]

RELEASE = "0.5.14"
NAME = "capture_sink_patch"
LLAMA = "sglang/srt/models/llama.py"


@pytest.fixture(scope="module")
def patched_by_other(tmp_path_factory):
    """(python, site-packages, the other patch's text, hashes of the package after it)."""
    python = fresh_venv(tmp_path_factory.mktemp("venv") / "v")
    install_wheel(python, download_wheel(RELEASE))
    site = site_packages(python)
    patch = capture_sink_patch(site)
    apply_recorded(site, patch, NAME)
    return python, site, patch, tree_hashes(site / "sglang")


def test_apply_goes_on_top_of_another_patch_and_revert_gives_its_bytes_back(patched_by_other):
    python, site, patch, theirs = patched_by_other
    package = site / "sglang"
    edited = {f"sglang/srt/{rel}" for rel in EDITS} | {f"sglang/srt/{NEW_MODULE}"}

    before = sglang("status", "--python", str(python))
    assert before.exit_code == 0, before.output
    assert "not one auxcap has been tried on" not in before.output
    assert "auxcap's change: not applied" in before.output
    assert (
        f"another patch: {NAME} (its copy: sglang/.{NAME}.applied; it adds 1, modifies "
        f"{len(EDITS)} files), all of them differ from the release"
    ) in before.output
    for path in sorted(edited):
        kind = "added" if path.endswith(NEW_MODULE) else "modified"
        assert f"  {kind}: {path} (by {NAME})" in before.output

    done = sglang("apply", "--python", str(python))
    assert done.exit_code == 0, done.output
    assert f"on top of another patch: {NAME} (its copy" in done.output
    assert f"patched: {LLAMA} (on top of {NAME}'s change, kept)" in done.output

    # The files the generator changes on the release, with its bytes where the other
    # patch did not touch the file; the other patch's lines kept where it did.
    release = generate(sglang_tree(RELEASE))
    assert release.changed and LLAMA in release.changed
    after = tree_hashes(package)
    changed = {
        f"sglang/{path}" for path in set(after) | set(theirs) if after.get(path) != theirs.get(path)
    }
    assert changed == set(release.changed) | {"sglang/.auxcap-journal.json"}
    for change in release.changes:
        if change.path not in edited:
            assert (site / change.path).read_bytes() == change.new.encode(), change.path
    for rel, (_, inserted) in EDITS.items():
        assert inserted in (package / "srt" / rel).read_text(), rel
    llama = (site / LLAMA).read_text()
    assert "pp_aux_collect(" in llama and "set_pp_aux_capture(" in llama
    assert (package / "srt" / NEW_MODULE).is_file()

    status = sglang("status", "--python", str(python))
    assert status.exit_code == 0, status.output
    assert f"auxcap's change: applied (release {RELEASE}, every model," in status.output
    assert f"patched by auxcap (on top of {NAME}'s change): {LLAMA}" in status.output
    assert f"another patch: {NAME} (its copy" in status.output
    assert (
        f"modified: {LLAMA} (by {NAME}; auxcap's change on top of it, in the journal)"
    ) in status.output
    assert "without a journal" not in status.output

    reverted = sglang("revert", "--python", str(python))
    assert reverted.exit_code == 0, reverted.output
    assert tree_hashes(package) == theirs
    assert (package / f".{NAME}.applied").read_text() == patch
