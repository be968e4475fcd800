"""Reports: unified diffs, the end-of-run summary, and the scan listing (text or JSON).

``scan --format json`` prints one JSON object (schema: ``codemods/output/schemas/scan-schema.json``)::

    {
      "version": 2,
      "files": [
        {"path": "train.py", "status": "unchanged" | "changed" | "failed",
         "error": null | "reason",
         "call_sites": [
           {"path": "train.py", "line": 12, "column": 5,          # 1-based
            "hook": ["set_dspark_layers_to_capture"],              # every hook it may reach
            "shape": "direct" | "unbound" | "getattr" | "variable" | "dict-lookup" | "loop",
            "ids_source": "args.capture_layers" | null,            # source of the ids argument
            "risks": ["safe" | "maybe-none" | "literal-none" | "pp-unsupported"
                      | "pp-silent", ...],
            "guarded": false,                                       # behind a check of the ids
            "handles_not_implemented": false,                       # inside a matching try
            "actions": ["none" | "guard" | "fallback" | "review", ...],
            "note": ""}]}],
      "summary": {"files": 3, "call_sites": 4, "changed": 0, "review": 1, "failed": 0}
    }

Only files with call sites or errors are listed under ``files``; ``summary.files`` counts
every file scanned.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from codemods.callers.records import CallSite, FileResult, Risk, Status, is_skipped
from codemods.callers.rewrite import registry
from codemods.output import diffs

#: 2: ``hook`` is a list of hook names (1: one string, names joined with ``|``).
SCAN_JSON_VERSION = 2

#: The JSON Schema of ``scan --format json`` (``codemods/output/schemas/scan-schema.json``).
SCAN_SCHEMA_FILE = Path(__file__).resolve().parent / "schemas" / "scan-schema.json"


def __getattr__(name: str):
    """``SCAN_JSON_SCHEMA``: the schema file's content, read on first use."""
    if name == "SCAN_JSON_SCHEMA":
        schema = json.loads(SCAN_SCHEMA_FILE.read_text(encoding="utf-8"))
        globals()[name] = schema
        return schema
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _needs_change(result: FileResult) -> bool:
    """Changed by migrate, or (for a scan) would be: a call site needs a rewrite."""
    if result.status is Status.CHANGED:
        return True
    return result.status is Status.UNCHANGED and any(
        action in registry.ACTIONS for site in result.call_sites for action in site.actions
    )


@dataclass(frozen=True)
class Summary:
    """End-of-run counts.  ``changed``: files changed (or, for a scan, needing a change)."""

    files: int = 0
    call_sites: int = 0
    #: Files holding at least one call site (text only: "N call sites in M files").
    call_site_files: int = 0
    changed: int = 0
    review: int = 0
    failed: int = 0

    @classmethod
    def of(cls, results: Iterable[FileResult]) -> Summary:
        results = list(results)
        return cls(
            files=len(results),
            call_sites=sum(len(result.call_sites) for result in results),
            call_site_files=sum(bool(result.call_sites) for result in results),
            changed=sum(_needs_change(result) for result in results),
            review=sum(result.review_count for result in results),
            failed=sum(result.status is Status.FAILED for result in results),
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "files": self.files,
            "call_sites": self.call_sites,
            "changed": self.changed,
            "review": self.review,
            "failed": self.failed,
        }

    def text(self, changed_label: str = "changed") -> str:
        return (
            f"{self.files} file(s) scanned, {_plural(self.call_sites, 'call site')} in "
            f"{_plural(self.call_site_files, 'file')}, "
            f"{self.changed} {changed_label}, {self.review} left for review, "
            f"{self.failed} failed"
        )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


#: Printed after a scan listing calls at risk of losing their captures silently under PP.
PP_SILENT_HINT = (
    "risk: {count} may lose their captures silently under pipeline parallelism (some "
    "models' hooks return early on non-last PP ranks, without an error): run with "
    "--pp-size 1, or apply `auxcap upstream-patch SGLANG_ROOT` to the SGLang tree"
)


def pp_silent_hint(results: Iterable[FileResult]) -> str | None:
    """The scan's line about calls that lose captures silently under PP, or None.

    It counts only the sites ``migrate`` would change (a rewrite action, in a file it can
    process), like the "to change" count beside it: not the sites it leaves alone (test
    modules, other engines' modules, capture required, nothing to rewrite)."""
    count = sum(
        Risk.PP_SILENT in site.risks and not is_skipped(site) and _rewritten(site)
        for result in results
        if result.status is not Status.FAILED
        for site in result.call_sites
    )
    return PP_SILENT_HINT.format(count=_plural(count, "call site")) if count else None


def _rewritten(site: CallSite) -> bool:
    return any(action in registry.ACTIONS for action in site.actions)


def unified_diff(result: FileResult) -> str:
    """The change to one file as a unified diff, as text (empty when unchanged)."""
    if result.status is not Status.CHANGED or result.original is None or result.rewritten is None:
        return ""
    path = result.path.lstrip("/")
    return diffs.unified_diff(result.original, result.rewritten, f"a/{path}", f"b/{path}")


def unified_diff_bytes(result: FileResult) -> bytes:
    """The change to one file as a unified diff of its bytes, what ``--diff`` prints:
    ``git apply`` and ``patch -p1`` apply it whatever the file's encoding and line endings
    (empty when unchanged)."""
    if result.status is not Status.CHANGED or result.original is None or result.rewritten is None:
        return b""
    path = result.path.lstrip("/")
    return diffs.unified_diff_bytes(result.original, result.rewritten, f"a/{path}", f"b/{path}")


def format_site(site) -> str:
    risks = ",".join(risk.value for risk in site.risks)
    actions = ",".join(action.value for action in site.actions)
    text = (
        f"{site.path}:{site.line}:{site.column}: {site.hook} [{site.shape.value}] "
        f"ids={site.ids_source if site.ids_source is not None else '-'} "
        f"risk={risks} action={actions}"
    )
    return f"{text} ({site.note})" if site.note else text


def scan_text(results: Iterable[FileResult]) -> str:
    """The call sites, one line each (a file that failed is named on stderr, not here)."""
    lines = [format_site(site) for result in results for site in result.call_sites]
    return "".join(line + "\n" for line in lines)


def scan_json(results: Iterable[FileResult]) -> str:
    results = list(results)
    files = [
        {
            "path": result.path,
            "status": result.status.value,
            "error": result.error,
            "call_sites": [site.to_dict() for site in result.call_sites],
        }
        for result in results
        if result.call_sites or result.status is Status.FAILED
    ]
    document = {
        "version": SCAN_JSON_VERSION,
        "files": files,
        "summary": Summary.of(results).to_dict(),
    }
    return json.dumps(document, indent=2) + "\n"
