"""The data file (``codemods/catalog/hook_facts.json``, format in ``docs/hook-facts.md``): the
releases' facts merged, each distinct variant of a setter listed once with its releases, and
written as deterministic text."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from codemods.catalog.derive.facts import derive_release
from codemods.catalog.hook_facts import DATA_FILE, FORMAT

#: The releases the data file covers.
RELEASES = ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")

__all__ = ["DATA_FILE", "FORMAT", "RELEASES", "build", "dumps", "merge"]


def build(trees: Mapping[str, Path]) -> dict:
    """The whole data file (see docs/hook-facts.md)."""
    releases = sorted(trees, key=_version_key)
    return merge({release: derive_release(trees[release]) for release in releases})


def merge(per_release: Mapping[str, Mapping[str, Mapping[str, dict]]]) -> dict:
    """``{release: {hook: {setter: facts}}}`` -> the data file's layout, in which each setter
    lists its distinct facts once, with the releases that have them:
    ``{"format", "releases", "hooks": {hook: {setter: [{"releases": [...], **facts}]}}}``."""
    releases = sorted(per_release, key=_version_key)
    hooks: dict[str, dict[str, list[dict]]] = {}
    for release in releases:
        for hook, setters in per_release[release].items():
            for setter, facts in setters.items():
                variants = hooks.setdefault(hook, {}).setdefault(setter, [])
                for variant in variants:
                    if {k: v for k, v in variant.items() if k != "releases"} == facts:
                        variant["releases"].append(release)
                        break
                else:
                    variants.append({"releases": [release], **facts})
    return {"format": FORMAT, "releases": releases, "hooks": hooks}


def dumps(data: dict) -> str:
    """Deterministic text: sorted keys, one level of indent per nesting, and lists of strings
    or objects of plain values kept on one line."""
    return _dump(data, 0) + "\n"


def _flat(value: object) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, (str, int, float, bool)) or v is None for v in value)
    if isinstance(value, dict):
        return all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values())
    return True


def _dump(value: object, depth: int) -> str:
    if _flat(value):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    pad, inner = " " * depth, " " * (depth + 1)
    if isinstance(value, list):
        items = [inner + _dump(v, depth + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    assert isinstance(value, dict)
    items = [f"{inner}{json.dumps(k)}: {_dump(value[k], depth + 1)}" for k in sorted(value)]
    return "{\n" + ",\n".join(items) + "\n" + pad + "}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
