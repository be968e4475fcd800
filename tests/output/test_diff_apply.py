"""``migrate --diff`` applies to the bytes it was made from, in every encoding auxcap accepts.

Each file is committed in a fresh git repository; the diff auxcap prints is checked with
``git apply --check``, applied with ``git apply`` and, on a second copy, with ``patch -p1``;
both results must equal byte for byte what ``migrate --write`` writes.  The CodeTF report's
text diff shows the file's characters decoded with its own encoding.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.output import diffs
from tests.gitrepo import git, isolate_git

CALL = b"    model.set_dspark_layers_to_capture(args.capture_layers)"

CASES = {
    "latin-1 cookie": b"# -*- coding: latin-1 -*-\n# caf\xe9 cr\xe8me\n"
    b"def main(model, args):\n" + CALL + b"\n    print('d\xe9j\xe0 vu')\n",
    "utf-8 bom": b"\xef\xbb\xbfdef main(model, args):\n" + CALL + b"\n",
    "crlf": b"# \xc3\xa9t\xc3\xa9\r\ndef main(model, args):\r\n" + CALL + b"\r\n    return 1\r\n",
    "bom and crlf": b"\xef\xbb\xbfimport os\r\n\r\ndef main(model, args):\r\n" + CALL + b"\r\n",
    "no newline at the end": b"def main(model, args):\n" + CALL,
    # str.splitlines would cut at \x0b, \x0c and \x1c: only \n ends a diff line.
    "form feed and separators in a comment": b"def main(model, args):\n\x0c\n"
    + CALL
    + b"\n    return 1  # a\x0bb\x0cc\x1cd\n",
}


def auxcap(*args: str):
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "core.autocrlf", "false")
    monkeypatch.chdir(root)
    return root


def _written(root: Path, name: str, source: bytes) -> bytes:
    copy = root.parent / "written"
    copy.mkdir()
    (copy / name).write_bytes(source)
    result = auxcap("migrate", "--write", str(copy / name))
    assert result.exit_code == 0, result.output
    return (copy / name).read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_diff_applies_with_git_and_patch(repo, case):
    source = CASES[case]
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_bytes(source)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    patched_copy = repo.parent / "for-patch"
    shutil.copytree(repo, patched_copy)

    result = auxcap("migrate", ".")
    assert result.exit_code == 0, result.output
    diff = result.stdout_bytes
    assert diff.startswith(b"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n")
    patch_file = repo.parent / "change.diff"
    patch_file.write_bytes(diff)

    check = subprocess.run(
        ["git", "apply", "--check", str(patch_file)], cwd=repo, capture_output=True
    )
    assert check.returncode == 0, check.stderr.decode(errors="replace")
    git(repo, "apply", str(patch_file))
    expected = _written(repo, "mod.py", source)
    assert expected != source
    assert (repo / "pkg" / "mod.py").read_bytes() == expected

    patched = subprocess.run(
        ["patch", "-p1", "--quiet", "--input", str(patch_file)],
        cwd=patched_copy,
        capture_output=True,
    )
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert (patched_copy / "pkg" / "mod.py").read_bytes() == expected


def test_the_latin_1_diff_carries_the_file_bytes_not_replacement_characters(repo):
    (repo / "mod.py").write_bytes(CASES["latin-1 cookie"])
    diff = auxcap("migrate", ".").stdout_bytes
    assert b"# caf\xe9 cr\xe8me" in diff and b"d\xe9j\xe0 vu" in diff
    assert "\ufffd".encode() not in diff


def test_the_json_report_decodes_with_the_file_encoding(repo):
    (repo / "mod.py").write_bytes(CASES["latin-1 cookie"])
    report = json.loads(auxcap("migrate", "--format", "json", ".").stdout)
    texts = [change["diff"] for result in report["results"] for change in result["changeset"]]
    assert texts and all("# café crème" in text for text in texts)
    assert not any("\ufffd" in text for text in texts)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_text_diff_is_the_byte_diff_decoded(case):
    source = CASES[case]
    after = source.replace(CALL, b"    pass  # " + CALL.strip())
    as_bytes = diffs.unified_diff_bytes(source, after, "a/m.py", "b/m.py")
    as_text = diffs.unified_diff(source, after, "a/m.py", "b/m.py")
    encoding = diffs.source_encoding(source)
    assert as_text == as_bytes.decode(encoding)
    assert diffs.byte_lines(source) and b"".join(diffs.byte_lines(source)) == source


def test_colouring_keeps_every_character_of_the_diff():
    from click import unstyle

    from codemods.cli.terminal import colour_diff

    source = CASES["form feed and separators in a comment"]
    text = diffs.unified_diff(source, source.replace(CALL, b"    pass"), "a/m.py", "b/m.py")
    coloured = colour_diff(text)
    assert coloured != text and unstyle(coloured) == text
    assert "\x1b[32m+    pass\x1b[0m\n" in coloured
