"""The journal of one change to an installed SGLang: ``<package>/.auxcap-journal.json``.

Written atomically (``sources.fileio.write_output_atomic``) before the first file is touched,
in state ``applying``; set to ``applied`` once every file is written and compiles; set to
``reverting`` before a revert restores the first file, and deleted when it is done.  A
journal found in state ``applying`` or ``reverting`` means a command stopped half way: the
next command rolls every file back to its recorded bytes (``transaction.recover``).

Per file: its tree path, the sha256 of its bytes before (None: the change adds it) and
after, whether the bytes before were the release's own, and the bytes before themselves
(base64), so a revert is byte-exact and deletes the files the change added.  Directories the
change had to create are listed too, deepest last, so a revert removes them again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from codemods import __version__
from codemods.installed.errors import InstalledError
from codemods.sources.fileio import write_output_atomic

JOURNAL_NAME = ".auxcap-journal.json"
APPLYING, APPLIED, REVERTING = "applying", "applied", "reverting"
FORMAT = 1


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Entry:
    """One file of the change."""

    path: str
    before_sha256: str | None
    after_sha256: str
    #: True/False where the release's hash is known, None where it is not.
    before_pristine: bool | None
    before_b64: str | None

    @property
    def before(self) -> bytes | None:
        return None if self.before_b64 is None else base64.b64decode(self.before_b64)

    @classmethod
    def of(cls, path: str, before: bytes | None, after: bytes, pristine: bool | None) -> Entry:
        return cls(
            path,
            None if before is None else sha256(before),
            sha256(after),
            pristine,
            None if before is None else base64.b64encode(before).decode("ascii"),
        )


@dataclass
class Journal:
    state: str
    release: str
    tree_root: str
    package: str
    models: list[str] | None
    entries: list[Entry]
    created_dirs: list[str] = field(default_factory=list)
    tool_version: str = __version__
    format: int = FORMAT
    started: str = field(
        default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds")
    )

    @property
    def paths(self) -> list[str]:
        return [entry.path for entry in self.entries]


def journal_path(package: Path) -> Path:
    return package / JOURNAL_NAME


def save(package: Path, journal: Journal) -> None:
    data = json.dumps(asdict(journal), indent=1, sort_keys=True).encode("utf-8") + b"\n"
    write_output_atomic(journal_path(package), data)


def load(package: Path) -> Journal | None:
    """The journal in ``package``, or None; ``InstalledError`` for one that cannot be read."""
    path = journal_path(package)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise InstalledError(f"{path}: unreadable journal: {err}") from err
    try:
        entries = [Entry(**entry) for entry in raw.pop("entries")]
        journal = Journal(entries=entries, **raw)
    except (TypeError, KeyError) as err:
        raise InstalledError(f"{path}: not a journal auxcap wrote: {err}") from err
    if journal.format != FORMAT or journal.state not in (APPLYING, APPLIED, REVERTING):
        raise InstalledError(
            f"{path}: journal format {journal.format}, state {journal.state!r} not understood"
        )
    return journal


def delete(package: Path) -> None:
    try:
        os.unlink(journal_path(package))
    except FileNotFoundError:
        pass
