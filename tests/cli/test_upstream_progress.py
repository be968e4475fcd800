"""``upstream-patch`` shows its progress on a terminal: files (or parts) done of all, and
the phase; nothing on a stream that is not a terminal."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

from codemods.cli.upstream_patch import ProgressBar
from codemods.upstream.generate import generate
from codemods.upstream.parts import PARTS

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
MODELS = ("family_llama_like.py", "family_qwen_base.py", "family_qwen_derived.py")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _tree(path: Path) -> Path:
    shutil.copytree(FIXTURES / "mini_sglang" / "sglang", path / "sglang")
    for name in MODELS:
        shutil.copyfile(FIXTURES / name, path / "sglang" / "srt" / "models" / name)
    return path


def test_progress_names_the_phase_and_counts_files_and_parts(tmp_path):
    stream = Terminal()
    bar = ProgressBar(stream, delay=0.0, interval=0.0)
    result = generate(_tree(tmp_path), progress=bar)
    bar.close()
    shown = stream.getvalue()
    assert result.patch
    assert f"/{len(MODELS)} model files planned" in shown
    assert f"/{len(PARTS)} part validation" in shown
    assert shown.endswith("\r\x1b[K")  # the bar is wiped before other output


def test_no_progress_off_a_terminal(tmp_path):
    stream = io.StringIO()
    bar = ProgressBar(stream, delay=0.0, interval=0.0)
    generate(_tree(tmp_path), progress=bar)
    bar.close()
    assert stream.getvalue() == ""
