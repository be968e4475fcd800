"""Which model files the upstream patch rewrites, per SGLang release line.

:func:`release_column` asks the generator itself (the answers of its parts: the
capture-hook family plan and the parts that rewrite a model file of their own) about one
release tree; :func:`matrix` lays several releases side
by side: one row per model file with a capture hook in any of them, one column per
release.  A cell says how the file captures (the rewriter that patched it) or why it is
not patched; the reasons are listed under the table, once per distinct reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from codemods.catalog.methods import NATIVE
from codemods.upstream.family import registry
from codemods.upstream.family.plan import RAISES_PP
from codemods.upstream.generate import generate
from codemods.upstream.output.family_report import REFUSES_PP
from codemods.upstream.part import NEEDS_PATCH, PATCHED, SUPPORTED


def capture_shape(decision) -> str:
    """How a patched model file captures, in a few words (the cell of its first capture
    kind, ``CaptureKind.cell``)."""
    if decision.capture_kinds:
        return registry.cell(decision.capture_kinds[0])
    return "other model files"


#: A model that refuses PP in its constructor: the early return of its hooks, which never
#: runs, is dropped; it declares no relay.
DEAD_RETURN_CELL = "dead early return dropped (refuses PP)"
#: Kimi on a release that relays DSPARK captures itself (0.5.21+): its entry and width
#: method are renamed for every capture method (``graph_sizing.py``).
RELAY_RENAME_CELL = f"renamed: SGLang's {NATIVE.name} relay serves every capture method"
KIMI_CELLS = {
    NEEDS_PATCH: f"patched: {NATIVE.name} relay",
    PATCHED: "already patched",
    SUPPORTED: f"no: SGLang relays {NATIVE.name} captures itself",
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
    if decision.inherits:  # a subclass whose own stack does not relay: say why
        return f"no: {decision.reason}"
    if not decision.early_return:
        return "no: no early return"
    if decision.reason.startswith(REFUSES_PP):
        return DEAD_RETURN_CELL if decision.dead_returns else "no: refuses PP"
    return f"no: {decision.reason}"


def release_column(root: Path | str, version: str) -> Column:
    """The generator's decision for every model file with a capture hook in ``root``: the
    family plan's per file, and the answer of each part that rewrites a model file of its
    own (which wins over the family's "rewritten by ..." for that file)."""
    result = generate(root)
    column = Column(version)
    owned = {state.file for state in result.models}
    if result.family is not None:
        for decision in result.family.decisions.values():
            if decision.file not in owned:
                column.cells[decision.file] = _cell(decision)
    for state in result.models:
        column.cells[state.file] = KIMI_CELLS[state.status]
        if state.status == SUPPORTED and state.path in result.changed:
            column.cells[state.file] = RELAY_RENAME_CELL
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
        DEAD_RETURN_CELL,
        "no: raises under PP",
        KIMI_CELLS[SUPPORTED],
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
