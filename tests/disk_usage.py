"""Bytes a folder takes on disk, the way ``du`` counts them, for the tests that check the
disk figures the README and ``docs/setup.md`` give."""

from __future__ import annotations

from pathlib import Path


def disk_usage(*paths: Path) -> int:
    """Allocated bytes of ``paths`` and everything below them: each file once (hard links
    counted once), symlinks not followed."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for path in paths:
        for entry in [path, *path.rglob("*")]:
            stat = entry.lstat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total
