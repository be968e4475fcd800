"""``auxcap sglang status|apply|revert`` on release wheels across the releases auxcap was
tried on, from the oldest with capture hooks to the first with the later model layout (each
installed with ``pip install --no-deps`` into a fresh venv): ``apply`` (every model)
changes exactly the files ``upstream-patch`` changes on the release, with its bytes,
journalled; ``status`` reports it applied with nothing else differing; ``revert`` leaves
every byte of the package as installed.  (0.5.14, after another project's patch:
``test_sglang_installed_foreign.py``; 0.5.23: ``test_sglang_installed.py``.)
"""

from __future__ import annotations

import pytest
from sglang_support.env import download_wheel, sglang_tree
from sglang_support.installed import fresh_venv, install_wheel, sglang, site_packages, tree_hashes

from codemods.installed.journal import JOURNAL_NAME
from codemods.installed.locate import TRIED_RELEASES
from codemods.upstream.generate import generate

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]

#: The oldest release with capture hooks, the last before the Kimi-Linear model file, two
#: that ship it without a DSPARK hook, and the first of the 0.5.17+ layout.
RELEASES = ("0.4.10.post2", "0.5.3.post3", "0.5.9", "0.5.16", "0.5.17")


@pytest.mark.parametrize("version", RELEASES)
def test_apply_status_revert_on_a_release_wheel(version, tmp_path):
    assert version in TRIED_RELEASES
    python = fresh_venv(tmp_path / "v")
    install_wheel(python, download_wheel(version))
    package = site_packages(python) / "sglang"
    installed = tree_hashes(package)
    args = ("--python", str(python))

    done = sglang("apply", *args)
    assert done.exit_code == 0, done.output
    assert "not one auxcap has been tried on" not in done.output
    release = generate(sglang_tree(version))
    assert release.changed
    after = tree_hashes(package)
    changed = {
        path for path in set(after) | set(installed) if after.get(path) != installed.get(path)
    }
    assert changed == {path.removeprefix("sglang/") for path in release.changed} | {JOURNAL_NAME}
    for change in release.changes:
        assert (package.parent / change.path).read_bytes() == change.new.encode(), change.path

    status = sglang("status", *args)
    assert status.exit_code == 0, status.output
    assert f"auxcap's change: applied (release {version}, every model," in status.output
    assert "other differences from the release: none" in status.output

    reverted = sglang("revert", *args)
    assert reverted.exit_code == 0, reverted.output
    assert tree_hashes(package) == installed
