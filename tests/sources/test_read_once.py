"""``migrate --diff`` opens a file with hook calls once: the prefilter's read is handed on to
the transform (reads are counted where they start, ``fileio._open_for_reading``)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from click.testing import CliRunner

from codemods.cli.commands import cli
from codemods.sources import fileio

HOOKED = "def enable(model, args):\n    model.set_dspark_layers_to_capture(args.capture_layers)\n"
PLAIN = "def unrelated():\n    return 1\n"


@pytest.fixture
def opens(monkeypatch):
    counts: Counter[str] = Counter()
    real_open = fileio._open_for_reading

    def counting_open(path):
        counts[os.path.basename(path)] += 1
        return real_open(path)

    monkeypatch.setattr(fileio, "_open_for_reading", counting_open)
    return counts


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_file_with_hook_calls_is_opened_once(tmp_path, opens, jobs):
    (tmp_path / "runner.py").write_text(HOOKED)
    (tmp_path / "plain.py").write_text(PLAIN)
    result = CliRunner().invoke(cli, ["migrate", "--diff", "--jobs", jobs, str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "+    if args.capture_layers:" in result.stdout  # it really was rewritten
    assert opens["runner.py"] == 1
    assert opens["plain.py"] == 1


def test_the_count_sees_a_second_read(tmp_path, opens):
    """The counter works: a check that reads the file again is seen."""
    (tmp_path / "runner.py").write_text(HOOKED)
    fileio.read_source(tmp_path / "runner.py")
    fileio.read_bytes(tmp_path / "runner.py")
    assert opens["runner.py"] == 2
