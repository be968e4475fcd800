"""Which model files the upstream patch rewrites, per SGLang release line.

:func:`release_column` asks the generator itself (the Kimi-Linear and Kimi-K3
rewriters and the capture-hook family plan) about one release tree; :func:`matrix` lays several releases side
by side: one row per model file with a capture hook in any of them, one column per
release.  A cell says how the file captures (the rewriter that patched it) or why it is
not patched; the reasons are listed under the table, once per distinct reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codemods.upstream.family import registry
from codemods.upstream.family.patch import plan_for_tree
from codemods.upstream.family.plan import RAISES_PP
from codemods.upstream.kimi import k3 as kimi_k3
from codemods.upstream.kimi import linear as kimi
from codemods.upstream.output.family_report import REFUSES_PP
from codemods.upstream.sizing.graph_sizing import rename_dspark_entry
from codemods.upstream.tree.sglang_tree import detect_tree


def capture_shape(decision) -> str:
    """How a patched model file captures, in a few words (the cell of its first capture
    kind, ``CaptureKind.cell``)."""
    if decision.capture_kinds:
        return registry.cell(decision.capture_kinds[0])
    return "other model files"


KIMI_FILE = "kimi_linear.py"
K3_FILE = "kimi_k3.py"
#: Kimi on a release that relays DSPARK captures itself (0.5.21+): its entry and width
#: method are renamed for every capture method (``graph_sizing.py``).
RELAY_RENAME_CELL = "renamed: SGLang's DSPARK relay serves every capture method"
KIMI_CELLS = {
    kimi.NEEDS_PATCH: "patched: DSPARK relay",
    kimi.PATCHED: "already patched",
    kimi.SUPPORTED: "no: SGLang relays DSPARK captures itself",
}


@dataclass
class Column:
    """What the generator decides for one release: model file -> cell text."""

    version: str
    cells: dict[str, str] = field(default_factory=dict)

    @property
    def patched(self) -> int:
        return sum(cell.startswith("patched") for cell in self.cells.values())


def _cell(decision) -> str:
    if decision.patched:
        return f"patched: {capture_shape(decision)}"
    if decision.reason.startswith(RAISES_PP):
        return "no: raises under PP"
    if not decision.early_return:
        return "no: no early return"
    if decision.reason.startswith(REFUSES_PP):
        return "no: refuses PP"
    return f"no: {decision.reason}"


def release_column(root: Path | str, version: str) -> Column:
    """The generator's decision for every model file with a capture hook in ``root``."""
    tree = detect_tree(root)
    column = Column(version)
    plan = plan_for_tree(tree)
    for decision in plan.decisions.values():
        if decision.file not in (KIMI_FILE, K3_FILE):
            column.cells[decision.file] = _cell(decision)
    for file, rewriter in ((KIMI_FILE, kimi), (K3_FILE, kimi_k3)):
        source = tree.read_text(tree.module_path(rewriter.MODULE))
        if source is None:
            continue
        try:
            status = rewriter.analyse(source, rewriter.MODULE).status
        except kimi.UnrecognisedShape as error:
            column.cells[file] = f"no: {error}"
        else:
            column.cells[file] = KIMI_CELLS[status]
            if status == kimi.SUPPORTED and rename_dspark_entry(source, file) != source:
                column.cells[file] = RELAY_RENAME_CELL
    return column


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def matrix(columns: Sequence[Column]) -> str:
    """The Markdown table of ``columns`` and the list of reasons its cells refer to."""
    files = sorted({file for column in columns for file in column.cells})
    reasons: list[str] = []
    head = "| model file | " + " | ".join(c.version for c in columns) + " |"
    rows = [head, "|---|" + "---|" * len(columns)]
    short = (
        "no: no early return",
        "no: refuses PP",
        "no: raises under PP",
        KIMI_CELLS[kimi.SUPPORTED],
    )
    for file in files:
        cells = []
        for column in columns:
            cell = column.cells.get(file)
            if cell is None:
                cells.append("-")
            elif (
                cell.startswith("patched")
                or cell in short
                or cell in ("already patched", RELAY_RENAME_CELL)
            ):
                cells.append(cell)
            else:
                if cell not in reasons:
                    reasons.append(cell)
                cells.append(f"no [{reasons.index(cell) + 1}]")
        rows.append(f"| `{file}` | " + " | ".join(cells) + " |")
    rows.append("| **patched** | " + " | ".join(str(c.patched) for c in columns) + " |")
    notes = "".join(
        f"{number}. {_escape(reason.removeprefix('no: '))}\n"
        for number, reason in enumerate(reasons, start=1)
    )
    return "\n".join(rows) + "\n" + (f"\nWhy not patched:\n\n{notes}" if notes else "")
