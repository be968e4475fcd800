"""git-style patch emission: every patch must be accepted by ``git apply`` and reproduce the
wanted text exactly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemods.upstream.edit.change_kinds import RUNTIME, Role
from codemods.upstream.edit.patchfile import FileChange, blob_id, render_patch

GIT = shutil.which("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git executable not installed")


def _change(path: str, old: str | None, new: str) -> FileChange:
    return FileChange(path, old, new, RUNTIME, Role.SIZING)


def _apply(root: Path, patch: str, check_only: bool = False) -> subprocess.CompletedProcess:
    args = ["git", "apply", "--check"] if check_only else ["git", "apply"]
    return subprocess.run(args, cwd=root, input=patch, text=True, capture_output=True)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())


def test_blob_id_matches_git_hash_object(tmp_path):
    text = "print('x')\n"
    _write(tmp_path, "f.py", text)
    out = subprocess.run(
        ["git", "hash-object", "f.py"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert blob_id(text) == out


def test_modified_and_new_files_apply_and_match(tmp_path):
    old = "".join(f"line {i}\n" for i in range(40))
    new = old.replace("line 5\n", "line five\n").replace("line 30\n", "") + "tail\n"
    _write(tmp_path, "pkg/a.py", old)
    patch = render_patch(
        [
            _change("pkg/a.py", old, new),
            _change("pkg/sub/new.py", None, "x = 1\ny = 2\n"),
            _change("pkg/same.py", "same\n", "same\n"),
        ]
    )
    assert patch.count("diff --git") == 2
    assert "new file mode 100644\n--- /dev/null" not in patch  # index line sits between
    assert "diff --git a/pkg/sub/new.py b/pkg/sub/new.py\nnew file mode 100644\nindex " in patch
    assert "@@ -0,0 +1,2 @@" in patch
    assert _apply(tmp_path, patch, check_only=True).returncode == 0
    assert _apply(tmp_path, patch).returncode == 0
    assert (tmp_path / "pkg/a.py").read_text() == new
    assert (tmp_path / "pkg/sub/new.py").read_text() == "x = 1\ny = 2\n"


def test_nothing_to_do_is_empty():
    assert render_patch([_change("a.py", "x\n", "x\n")]) == ""


def test_missing_final_newline_round_trips(tmp_path):
    old, new = "a\nb", "a\nc"
    _write(tmp_path, "f.txt", old)
    patch = render_patch([_change("f.txt", old, new)])
    assert "\\ No newline at end of file" in patch
    assert _apply(tmp_path, patch).returncode == 0, patch
    assert (tmp_path / "f.txt").read_bytes() == new.encode()


def test_patch_against_drifted_file_is_rejected(tmp_path):
    old = "".join(f"v{i}\n" for i in range(10))
    _write(tmp_path, "f.txt", old.replace("v5", "drift"))
    patch = render_patch([_change("f.txt", old, old.replace("v5\n", "v5 changed\n"))])
    assert _apply(tmp_path, patch, check_only=True).returncode != 0


_lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "d\r\n", "    x = 1\n"]), max_size=30)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(old=_lines, new=_lines, tail=st.sampled_from(["", "end", "end\n"]))
def test_any_edit_round_trips_through_git_apply(tmp_path_factory, old, new, tail):
    root = tmp_path_factory.mktemp("rt")
    old_text, new_text = "".join(old) + tail, "".join(new) + tail[::-1].strip("\n") + "\n"
    _write(root, "f.txt", old_text)
    patch = render_patch([_change("f.txt", old_text, new_text)])
    if old_text == new_text:
        assert patch == ""
        return
    result = _apply(root, patch)
    assert result.returncode == 0, result.stderr + patch
    assert (root / "f.txt").read_bytes() == new_text.encode()
