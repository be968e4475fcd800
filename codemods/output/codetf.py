"""``migrate --format json``: a report shaped like the Code Transformation Format (CodeTF).

before: the per-file results of one ``migrate`` run (original and rewritten bytes, call sites).
after:  one JSON document (schema: ``docs/report-schema.json``, prose: ``docs/report.md``)::

    {"run": {"vendor", "tool", "version", "commandLine", "elapsed", "directory", "sarifs",
             "properties": {mode, policies, extra hooks, summary, failures}},
     "results": [                       # one per codemod, in the order they are applied
        {"codemod": "auxcap:python/guard-capture-ids", "summary", "description",
         "references": [{"url", "description"}],
         "properties": {"reviewGuidance", "policy", "appliedPolicies"},
         "failedFiles": [path], "unfixed": [{"path", "lineNumber", "reason"}],
         "changeset": [{"path", "diff", "changes": [
             {"lineNumber", "diffSide": "right", "description", "properties"}]}]}]}

As in CodeTF, the changesets of the results form a series of patches: the guard's diff is
against the original file, the fallback's against the guarded one; applied in order they give
the rewritten file.  ``lineNumber`` is the first line of the change in the file after that
codemod (``diffSide: right``); a change's ``description`` says what was done at that call site
under the policy applied there (:mod:`codemods.output.site_changes`); ``policy`` is the
option the codemod ran with, ``appliedPolicies`` the policies its changes applied (where the
code needs the capture the guard raises whatever the option), and ``reviewGuidance`` what a
reviewer checks for those changes (the codemod's general guidance when it changed nothing).  Paths are relative to ``run.directory`` when below it.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass

from codemods import __version__
from codemods.callers.options import TransformOptions
from codemods.callers.records import Action, CallSite, FileResult, Status, Step
from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import CodemodMetadata
from codemods.output import diffs, site_changes
from codemods.output.report import Summary

VENDOR = "auxcap"
TOOL = "auxcap"


@dataclass(frozen=True)
class RunInfo:
    """How the run went: the command line that re-creates it, how long it took, its mode
    (the directory is the builder's, :class:`ReportBuilder`)."""

    command_line: str
    elapsed_ms: int
    mode: str = "diff"


def _relative(path: str, directory: str) -> str:
    absolute = os.path.abspath(path)
    root = os.path.abspath(directory)
    if absolute == root or absolute.startswith(root.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, root).replace(os.sep, "/")
    return absolute.replace(os.sep, "/")


_lines = diffs.lines


def unified_diff(before: bytes, after: bytes, path: str) -> str:
    return diffs.unified_diff(before, after, f"a/{path}", f"b/{path}")


def new_line_number(before: bytes, after: bytes, line: int) -> int:
    """Where line ``line`` (1-based) of ``before`` is in ``after``: the same line when
    unchanged, else the first line of the block that replaced it."""
    matcher = difflib.SequenceMatcher(None, _lines(before), _lines(after), autojunk=False)
    index = line - 1
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if i1 <= index < i2 or (tag == "insert" and i1 == index):
            if tag == "equal":
                return j1 + (index - i1) + 1
            return j1 + 1
    return max(len(_lines(after)), 1)


def _policy(metadata: CodemodMetadata, options: TransformOptions) -> str:
    return options.policy(metadata)


def _changeset_entry(metadata: CodemodMetadata, step: Step, path: str, policy: str) -> dict | None:
    if step.before == step.after:
        return None
    changes = [
        {
            "lineNumber": new_line_number(step.before, step.after, site.line),
            "diffSide": "right",
            "description": site_changes.change(metadata, site, policy).text,
            "properties": {
                "lineNumberBefore": site.line,
                "column": site.column,
                "hook": site.hook,
                "shape": site.shape.value,
                "risks": [risk.value for risk in site.risks],
            },
        }
        for site in step.sites
    ]
    if not changes:  # a rewrite with no call site of its own cannot happen; keep CodeTF valid
        changes = [{"lineNumber": 1, "diffSide": "right", "description": metadata.summary}]
    return {"path": path, "diff": unified_diff(step.before, step.after, path), "changes": changes}


def _unfixed(metadata: CodemodMetadata, result: FileResult, path: str) -> list[dict]:
    """Call sites with a risk this codemod handles that it did not rewrite: left for review,
    or left alone on purpose (a test module, another engine, capture required); the reason
    is the site's note."""
    entries = []
    for site in result.call_sites:
        if Action(metadata.action) in site.actions:
            continue
        if not any(risk.value in metadata.addresses for risk in site.risks):
            continue
        if Action.REVIEW not in site.actions and not site.note:
            continue
        entries.append(
            {
                "path": path,
                "lineNumber": site.line,
                "reason": site.note or f"{site.hook} call left for review",
            }
        )
    return entries


class ReportBuilder:
    """Collects one run's results file by file (so the caller can drop each file's bytes
    after :meth:`add`) and builds the report at the end."""

    def __init__(self, options: TransformOptions, directory: str) -> None:
        self.options = options
        self.directory = os.path.abspath(directory)
        self._records: list[FileResult] = []
        self._changesets: dict[str, list[dict]] = {m.action: [] for m in registry.CODEMODS}
        self._unfixed: dict[str, list[dict]] = {m.action: [] for m in registry.CODEMODS}
        self._rewritten: dict[str, list[CallSite]] = {m.action: [] for m in registry.CODEMODS}

    def add(self, result: FileResult) -> None:
        path = _relative(result.path, self.directory)
        for metadata in registry.CODEMODS:
            step = result.step(metadata.action) if result.status is Status.CHANGED else None
            if step is not None:
                policy = _policy(metadata, self.options)
                entry = _changeset_entry(metadata, step, path, policy)
                if entry is not None:
                    self._changesets[metadata.action].append(entry)
                    self._rewritten[metadata.action].extend(step.sites)
            self._unfixed[metadata.action].extend(_unfixed(metadata, result, path))
        self._records.append(
            FileResult(result.path, result.status, result.call_sites, error=result.error)
        )

    def _properties(self, metadata: CodemodMetadata) -> dict:
        """The run's option, the policies the codemod's changes applied, and what a reviewer
        checks for them."""
        sites = self._rewritten[metadata.action]
        policy = _policy(metadata, self.options)
        applied = [site_changes.change(metadata, site, policy) for site in sites]
        reviews = list(dict.fromkeys(item.review for item in applied if item.review))
        return {
            "reviewGuidance": "; ".join(reviews) + "." if reviews else metadata.review_guidance,
            "policy": policy,
            "appliedPolicies": [
                name for name in metadata.policy.names if name in {item.policy for item in applied}
            ],
        }

    def build(self, run: RunInfo) -> dict:
        """The CodeTF-shaped report, as plain data."""
        failed = [result for result in self._records if result.status is Status.FAILED]
        failed_paths = [_relative(result.path, self.directory) for result in failed]
        results = [
            {
                "codemod": metadata.id,
                "summary": metadata.summary,
                "description": metadata.description,
                "references": [reference.to_dict() for reference in metadata.references],
                "properties": self._properties(metadata),
                "failedFiles": list(failed_paths),
                "unfixed": self._unfixed[metadata.action],
                "changeset": self._changesets[metadata.action],
            }
            for metadata in registry.CODEMODS
        ]
        return {
            "run": {
                "vendor": VENDOR,
                "tool": TOOL,
                "version": __version__,
                "commandLine": run.command_line,
                "elapsed": run.elapsed_ms,
                "directory": self.directory,
                "sarifs": [],
                "properties": {
                    "mode": run.mode,
                    "extraHooks": list(self.options.extra_hooks),
                    "summary": Summary.of(self._records).to_dict(),
                    "failures": [
                        {"path": path, "reason": result.error or ""}
                        for path, result in zip(failed_paths, failed, strict=True)
                    ],
                },
            },
            "results": results,
        }


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"
