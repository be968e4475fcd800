"""Each file once: symlinks to files and folders, inside and outside the paths given.

A symlink whose target is processed anyway is reported as a link to it, not processed a
second time (one diff, one write, exit 0); a symlink leading out of the paths given is not
followed unless ``--follow-links``; symlinked folders are never walked twice and never loop.
Each case runs in a git work tree (git lists the files) and outside one (a walk).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from codemods.callers.transform import TransformOptions, transform_source
from codemods.cli.commands import cli
from codemods.sources.collect import collect_files
from tests.gitrepo import isolate_git

GOOD = b"def main(model, args):\n    model.set_dspark_layers_to_capture(args.capture_layers)\n"
DONE = transform_source(GOOD, "x.py", TransformOptions()).rewritten
assert DONE is not None and DONE != GOOD


@pytest.fixture(params=["git", "walk"])
def tree(request, tmp_path, monkeypatch) -> Path:
    isolate_git(monkeypatch, tmp_path)
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "real.py").write_bytes(GOOD)
    if request.param == "git":
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    monkeypatch.chdir(root)
    return root


def auxcap(*args: str):
    result = CliRunner().invoke(cli, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_a_link_and_its_target_are_one_file(tree):
    os.symlink("real.py", tree / "pkg" / "alias.py")
    links: dict[str, str] = {}
    assert collect_files(["."], links=links) == [os.path.join("pkg", "real.py")]
    assert links == {
        os.path.join("pkg", "alias.py"): "symlink to pkg/real.py: processed once, as pkg/real.py"
    }

    diff = auxcap("migrate", ".")
    assert diff.exit_code == 0, diff.output
    assert diff.stdout.count("+++ ") == 1 and "+++ b/pkg/real.py" in diff.stdout
    assert "auxcap: pkg/alias.py: symlink to pkg/real.py" in diff.stderr
    assert "1 file(s) scanned" in diff.stderr

    scan = auxcap("scan", ".")
    assert scan.exit_code == 0
    assert scan.stdout.count("set_dspark_layers_to_capture") == 1
    assert "auxcap: pkg/alias.py: symlink to pkg/real.py" in scan.stderr

    write = auxcap("migrate", "--write", ".")
    assert write.exit_code == 0, write.output
    assert "changed: pkg/real.py" in write.stderr and "alias.py: cannot" not in write.stderr
    assert (tree / "pkg" / "real.py").read_bytes() == DONE
    assert (tree / "pkg" / "alias.py").is_symlink()


def test_a_link_named_with_its_target_is_one_file(tree):
    os.symlink("real.py", tree / "pkg" / "alias.py")
    write = auxcap("migrate", "--write", "pkg/alias.py", "pkg/real.py")
    assert write.exit_code == 0, write.output
    assert write.stderr.count("changed: ") == 1
    assert "pkg/alias.py: symlink to pkg/real.py" in write.stderr
    assert (tree / "pkg" / "real.py").read_bytes() == DONE


def test_two_links_to_one_outside_file_are_one_file_when_followed(tree, tmp_path):
    outside = tmp_path / "shared" / "mod.py"
    outside.parent.mkdir()
    outside.write_bytes(GOOD)
    os.symlink(outside, tree / "pkg" / "a_link.py")
    os.symlink(outside, tree / "pkg" / "b_link.py")

    plain = auxcap("migrate", "--write", ".")
    assert plain.exit_code == 0, plain.output
    assert outside.read_bytes() == GOOD  # not followed
    for name in ("a_link.py", "b_link.py"):
        assert f"pkg/{name}: symlink to {outside}, outside the paths given: not followed" in (
            plain.stderr
        )
    assert "--follow-links" in plain.stderr

    followed = auxcap("migrate", "--follow-links", "--write", ".")
    assert followed.exit_code == 0, followed.output
    assert "changed: pkg/a_link.py" in followed.stderr
    assert "pkg/b_link.py: symlink to pkg/a_link.py: processed once" in followed.stderr
    assert outside.read_bytes() == DONE
    assert (tree / "pkg" / "a_link.py").is_symlink()


def test_a_link_to_a_file_left_out_is_not_a_way_in(tree):
    (tree / "generated").mkdir()
    (tree / "generated" / "gen.py").write_bytes(GOOD)
    os.symlink("../generated/gen.py", tree / "pkg" / "gen.py")
    result = auxcap("migrate", "--write", "--exclude", "generated/", ".")
    assert result.exit_code == 0, result.output
    assert "pkg/gen.py: symlink to generated/gen.py, which is not selected itself" in (
        result.stderr
    )
    assert (tree / "generated" / "gen.py").read_bytes() == GOOD


def test_a_link_named_on_the_command_line_is_followed(tree, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_bytes(GOOD)
    os.symlink(outside, tree / "named.py")
    result = auxcap("migrate", "--write", "named.py")
    assert result.exit_code == 0, result.output
    assert outside.read_bytes() == DONE and (tree / "named.py").is_symlink()


def test_a_linked_folder_inside_the_tree_is_not_walked_again(tree):
    os.symlink("pkg", tree / "again")
    os.symlink(".", tree / "pkg" / "self")
    os.symlink("..", tree / "pkg" / "up")
    links: dict[str, str] = {}
    for follow in (False, True):
        files = collect_files(["."], follow_links=follow, links=links)
        assert files == [os.path.join("pkg", "real.py")]
    assert links == {}  # nothing left out: the folders' files are found under their own names
    result = auxcap("migrate", "--write", "--follow-links", ".")
    assert result.exit_code == 0 and result.stderr.count("changed: ") == 1


def test_a_linked_folder_outside_is_reported_or_walked_once(tree, tmp_path):
    shared = tmp_path / "shared"
    (shared / "deep").mkdir(parents=True)
    (shared / "deep" / "mod.py").write_bytes(GOOD)
    os.symlink(shared, tree / "first")
    os.symlink(shared, tree / "pkg" / "second")
    os.symlink(shared, shared / "deep" / "loop")  # a loop inside the outside folder

    links: dict[str, str] = {}
    assert collect_files(["."], links=links) == [os.path.join("pkg", "real.py")]
    assert set(links) == {"first", os.path.join("pkg", "second")}
    assert all("outside the paths given: not followed" in why for why in links.values())

    links.clear()
    files = collect_files(["."], follow_links=True, links=links)
    assert files == [os.path.join("first", "deep", "mod.py"), os.path.join("pkg", "real.py")]
    assert links == {}

    result = auxcap("migrate", "--write", "--follow-links", ".")
    assert result.exit_code == 0, result.output
    assert (shared / "deep" / "mod.py").read_bytes() == DONE


def test_a_link_to_a_folder_holding_the_tree_is_a_loop(tree):
    os.symlink(tree.parent, tree / "pkg" / "outer")
    links: dict[str, str] = {}
    files = collect_files(["pkg"], follow_links=True, links=links)
    assert files == [os.path.join("pkg", "real.py")]
    assert "which holds the paths given: not followed (a loop)" in links["pkg/outer"]


def test_a_folder_named_like_a_module_is_walked(tree):
    """``x.py/`` is a folder: given or found, it is walked like any other (exit 0)."""
    folder = tree / "plugins.py"
    folder.mkdir()
    (folder / "inner.py").write_bytes(GOOD)
    for args in (["."], ["plugins.py"]):
        result = auxcap("migrate", *args)
        assert result.exit_code == 0, result.output
        assert "+++ b/plugins.py/inner.py" in result.stdout
        assert "error" not in result.stderr
    write = auxcap("migrate", "--write", ".")
    assert write.exit_code == 0 and (folder / "inner.py").read_bytes() == DONE


def test_follow_links_is_documented():
    for command in ("scan", "migrate"):
        result = auxcap(command, "--help")
        assert "--follow-links" in result.output
