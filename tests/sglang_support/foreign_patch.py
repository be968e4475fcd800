"""Another project's patch of an installed SGLang, made the way such projects make theirs.

``capture_sink_patch(site)`` writes, for the package tree under ``site``, a unified diff in
a checkout's paths (``a/python/sglang/...``, so it applies to an installed package with
``patch -p2`` from ``site``) that adds a request-level capture sink: a field on the logits
processor's output, an attribute set in the scheduler's and the model runner's
constructors, a server argument, a new module ``srt/capture_sink.py``, and a flag set in
llama's capture setter (a model file auxcap patches too).  ``apply_recorded(site, patch,
name)`` applies it with ``patch -p2`` and keeps a copy of the patch text in the package as
``sglang/.<name>.applied``, as such scripts do to know later that it is applied.
``make_patch(root, edits, new_files)`` makes such a patch of any tree.

Each edit inserts lines after an anchor line that must occur in the file (the first
occurrence); a release without an anchor fails loudly.
"""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

#: file under ``sglang/srt/`` -> (anchor line, lines inserted after it).
EDITS = {
    "layers/logits_processor.py": (
        "    hidden_states: Optional[torch.Tensor] = None\n",
        "    # Captured for the request-level sink (capture_sink.py).\n"
        "    sink_hidden_states: Optional[torch.Tensor] = None\n",
    ),
    "managers/scheduler.py": (
        "        self.enable_overlap = not server_args.disable_overlap_schedule",
        "        self.capture_sink_path = getattr(server_args, 'capture_sink_path', None)\n",
    ),
    "model_executor/model_runner.py": (
        "        self.is_draft_worker = is_draft_worker\n",
        "        self.capture_sink = None  # opened on first use (capture_sink.py)\n",
    ),
    "server_args.py": (
        "    tokenizer_path: ",
        "    # Where the request-level capture sink writes (None: off).\n"
        "    capture_sink_path: Optional[str] = None\n",
    ),
    "models/llama.py": (
        "            self.capture_aux_hidden_states = True\n",
        "            self.capture_sink_enabled = True\n",
    ),
}
NEW_MODULE = "capture_sink.py"
NEW_TEXT = '''"""Writes captured hidden states of finished requests to a sink (a local test patch)."""

_OPEN = {}


def sink_for(path):
    """The sink writing to ``path``, opened once."""
    if path not in _OPEN:
        _OPEN[path] = open(path, "ab")
    return _OPEN[path]
'''


def _edited(text: str, anchor: str, inserted: str, where: str) -> str:
    start = text.find(anchor)
    assert start >= 0, f"{where}: no line starting {anchor!r}"
    end = text.index("\n", start) + 1
    return text[:end] + inserted + text[end:]


def make_patch(root: Path, edits: dict, new_files: dict[str, str]) -> str:
    """A unified diff in a checkout's paths (``a/python/<path>``) of ``edits`` (tree path
    under ``root`` -> (anchor, inserted lines)) and ``new_files`` (tree path -> text)."""
    chunks = []
    for path, (anchor, inserted) in edits.items():
        old = (root / path).read_text(encoding="utf-8")
        new = _edited(old, anchor, inserted, path)
        chunks.append(f"diff --git a/python/{path} b/python/{path}\n")
        chunks += difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            f"a/python/{path}",
            f"b/python/{path}",
        )
    for path, text in new_files.items():
        chunks.append(f"diff --git a/python/{path} b/python/{path}\nnew file mode 100644\n")
        chunks += difflib.unified_diff(
            [], text.splitlines(keepends=True), "/dev/null", f"b/python/{path}"
        )
    return "".join(chunks)


def capture_sink_patch(site: Path) -> str:
    """The patch text for the package at ``site/sglang`` (see the module docstring)."""
    edits = {f"sglang/srt/{rel}": edit for rel, edit in EDITS.items()}
    return make_patch(site, edits, {f"sglang/srt/{NEW_MODULE}": NEW_TEXT})


def apply_recorded(site: Path, patch: str, name: str) -> Path:
    """Apply ``patch`` to ``site`` with ``patch -p2`` and keep its copy in the package."""
    subprocess.run(
        ["patch", "-p2", "--batch", "-N", "-d", str(site)],
        input=patch,
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )
    record = site / "sglang" / f".{name}.applied"
    record.write_text(patch, encoding="utf-8")
    return record
