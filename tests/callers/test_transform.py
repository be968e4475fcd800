"""Per-file transform and the engine: failures leave files untouched, writes are atomic."""

from __future__ import annotations

import os
import stat

import pytest

from codemods.callers import engine, transform
from codemods.callers.records import Status
from codemods.callers.transform import TransformOptions, scan_source, transform_source

OPTIONS = TransformOptions()
NEEDS_CHANGE = b"def f(model, args):\n    model.set_dspark_layers_to_capture(args.layers)\n"


@pytest.mark.parametrize(
    "source, reason",
    [
        (b"def f(model, ids=None)\n    model.set_dspark_layers_to_capture(ids)\n", "syntax error"),
        (b"model.set_dspark_layers_to_capture(ids)  # \xff\n", "cannot decode"),
        (b"# -*- coding: no-such-codec -*-\nm.set_dspark_layers_to_capture(x)\n", "cannot decode"),
        (b"print 'py2' ; m.set_dspark_layers_to_capture(x)\n", "syntax error"),
    ],
)
def test_unparsable_files_fail_and_keep_their_bytes(source, reason):
    result = transform_source(source, "bad.py", OPTIONS)
    assert result.status is Status.FAILED
    assert reason in result.error
    assert result.rewritten is None and result.original == source
    assert scan_source(source, "bad.py", OPTIONS).status is Status.FAILED


@pytest.mark.parametrize(
    "source, message",
    [
        (
            b"def f(model, ids=None)\n    model.set_dspark_layers_to_capture(ids)\n",
            "syntax error at line 1, column 23: expected ':'",
        ),
        (
            b"x = 1\ny = = 2\nmodel.set_dspark_layers_to_capture(x)\n",
            "syntax error at line 2, column 5: invalid syntax",
        ),
        (
            b"def f(model):\n  x = 1\n    model.set_dspark_layers_to_capture(x)\n",
            "syntax error at line 3, column 4: unexpected indent",
        ),
        (
            b"s = 'abc\nmodel.set_dspark_layers_to_capture(x)\n",
            "syntax error at line 1, column 5: unterminated string literal (detected at line 1)",
        ),
    ],
)
def test_a_syntax_error_names_its_line_and_column_once_in_python_words(source, message):
    result = scan_source(source, "bad.py", OPTIONS)
    assert result.error == message
    assert "parser error" not in result.error and result.error.count(", column ") == 1


def test_syntax_python_accepts_but_libcst_cannot_parse_is_said_so():
    import libcst as cst

    error = cst.ParserSyntaxError(
        "parser error: error at 4:2: expected one of NAME",
        lines=["x\n"] * 4,
        raw_line=3,
        raw_column=0,
    )
    text = transform.describe_syntax_error(b"x = 1\n", "new.py", error)
    assert (
        text
        == "line 4, column 3: Python accepts it, but LibCST cannot parse it: expected one of NAME"
    )


def test_files_without_hook_calls_are_never_modified():
    for source in (b"import os\n", b"def broken(:\n", b"x = 'set_dspark_layers_to_capture'\n"):
        result = transform_source(source, "plain.py", OPTIONS)
        assert result.status is Status.UNCHANGED
        assert result.rewritten is None


def test_a_result_that_does_not_verify_is_failed(monkeypatch):
    def reject(rewritten: bytes, path: str) -> None:
        compile(b"def (:\n", path, "exec")

    monkeypatch.setattr(transform, "_verify", reject)
    result = transform_source(NEEDS_CHANGE, "f.py", OPTIONS)
    assert result.status is Status.FAILED
    assert result.error.startswith("could not rewrite: SyntaxError")
    assert result.rewritten is None
    assert len(result.call_sites) == 1


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError):
        TransformOptions(fallback_policy="ignore")
    with pytest.raises(ValueError):
        TransformOptions(extra_hooks=("not a name",))


def test_collect_files_walks_sorted_and_skips_tool_folders(tmp_path):
    for name in (
        "b.py",
        "a/z.pyi",
        "a/y.py",
        "notes.txt",
        ".git/x.py",
        ".venv/lib/x.py",
        "venv/x.py",
        "build/x.py",
        "a/__pycache__/x.py",
        "pkg/sub/deep.py",
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    explicit = tmp_path / "script"
    explicit.write_text("")
    files = engine.collect_files([tmp_path, explicit, tmp_path / "b.py"])
    relative = [os.path.relpath(path, tmp_path) for path in files]
    assert relative == ["a/y.py", "a/z.pyi", "b.py", "pkg/sub/deep.py", "script"]


def test_run_writes_atomically_and_keeps_the_mode(tmp_path):
    target = tmp_path / "train.py"
    target.write_bytes(NEEDS_CHANGE)
    target.chmod(0o750)
    (tmp_path / "other.py").write_bytes(b"import os\n")
    results = list(engine.run([tmp_path], OPTIONS, write=True))
    assert [os.path.basename(r.path) for r in results] == ["other.py", "train.py"]
    assert [r.status for r in results] == [Status.UNCHANGED, Status.CHANGED]
    assert target.read_bytes() == results[1].rewritten
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.py", "train.py"]


def test_run_without_write_changes_nothing(tmp_path):
    target = tmp_path / "train.py"
    target.write_bytes(NEEDS_CHANGE)
    (result,) = engine.run([target], OPTIONS, write=False)
    assert result.status is Status.CHANGED
    assert target.read_bytes() == NEEDS_CHANGE


def test_unreadable_and_missing_paths_are_failed_results(tmp_path):
    folder = tmp_path / "looks_like.py"
    folder.mkdir()
    (folder / "inner.py").write_bytes(b"")
    results = list(engine.run([tmp_path / "missing.py"], OPTIONS))
    assert results[0].status is Status.FAILED and "cannot read" in results[0].error


def test_failed_write_leaves_the_original(tmp_path, monkeypatch):
    target = tmp_path / "train.py"
    target.write_bytes(NEEDS_CHANGE)

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine.os, "replace", broken_replace)
    (result,) = engine.run([target], OPTIONS, write=True)
    assert result.status is Status.FAILED and "cannot write" in result.error
    assert target.read_bytes() == NEEDS_CHANGE
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


def test_a_rewrite_does_not_load_libcst_codemod_or_matchers():
    """libcst.codemod/libcst.matchers cost more than a whole fast run: only LibCST's own
    codemod CLI and CodemodTest (through GuardCommand/FallbackCommand) load them."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from codemods.callers.transform import transform_source\n"
        "src = b'def f(m, ids=None):\\n    m.set_dspark_layers_to_capture(ids)\\n'\n"
        "result = transform_source(src, 'x.py')\n"
        "assert result.status.value == 'changed', result\n"
        "loaded = [m for m in sys.modules if m.startswith(('libcst.codemod', 'libcst.matchers'))]\n"
        "print(sorted(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    command = subprocess.run(
        [
            sys.executable,
            "-c",
            "from codemods.callers.rewrite.guard import GuardCommand as G; "
            "print(G.__module__, G.__mro__[1].__name__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert command.stdout.split() == [
        "codemods.callers.rewrite.guard",
        "VisitorBasedCodemodCommand",
    ]
