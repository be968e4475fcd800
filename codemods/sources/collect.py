"""Collect the Python files a run works on.

``collect_files(paths)`` turns the command-line paths into a sorted, de-duplicated list of
files:

* A **directory** is searched for ``*.py`` and ``*.pyi`` files.  Inside a git work tree the
  search asks git (``git ls-files --cached --others --exclude-standard``), so ``.gitignore``,
  ``.git/info/exclude`` and the global excludes file are honoured; outside one it walks the
  file system.  A directory that git itself ignores is walked as if it were outside git (the
  user named it explicitly).
* Either way, these directories are never entered: ``.git``, ``.hg``, ``.svn``,
  ``__pycache__``, ``.tox``, ``.nox``, ``node_modules``, ``build``, ``.venv``, ``venv``,
  ``.eggs``, ``.mypy_cache``, ``.pytest_cache``, ``.hypothesis`` and every directory holding a
  ``pyvenv.cfg`` (any virtual environment, whatever its name).
* An explicitly named **file** is always processed, whatever its name, the ignore files or the
  globs say, unless ``force_exclude`` is set: then the exclude globs and the skipped directories
  above apply to it too (what a pre-commit hook wants, since it passes every staged file).

Globs (``--include`` / ``--exclude``) follow ``.gitignore`` conventions and are matched against
the path relative to the directory argument the file was found under (for an explicit file:
relative to the current directory when below it, else its absolute path), always with ``/``:

* a glob without ``/`` matches a file or directory name at any depth: ``*_pb2.py``,
  ``tests``, ``gen_*``;
* a glob with a ``/`` in it is anchored at that directory: ``srt/models/*.py``,
  ``/setup.py`` (a leading ``/`` is dropped);
* ``*`` and ``?`` never match ``/``; ``[...]`` is a character class; ``**`` matches any number
  of directories (``**/test_*.py``, ``srt/**/kernels``, ``docs/**``);
* a trailing ``/`` makes a glob match directories only (``generated/``);
* a glob that matches a directory matches everything below it.

``--exclude`` drops every file a glob matches; ``--include`` (when given) keeps only files
some glob matches.  Exclusion wins.

Nothing unread passes silently: a directory below a directory argument that cannot be listed
(``os.walk``'s error, or git's "could not open directory" warning) is recorded in
``unreadable`` (path -> reason) when the caller passes that dict, and returned among the files,
so that the run reports it as a path that could not be processed (exit 2); a source entry that
points nowhere (a dangling symlink or a loop, tracked by git or not) is returned as a file, and
its read names the problem.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

#: Directory names that are never searched.
SKIPPED_DIR_NAMES = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".tox",
        ".nox",
        "node_modules",
        "build",
        ".venv",
        "venv",
        ".eggs",
        ".mypy_cache",
        ".pytest_cache",
        ".hypothesis",
    }
)
#: A directory holding this file is a virtual environment.
VENV_MARKER = "pyvenv.cfg"
PYTHON_SUFFIXES = (".py", ".pyi")


class FileCollectionError(ValueError):
    """A command-line path that cannot be used (missing, not a file or directory)."""


#: pathspec's name for git's pattern rules (pathspec 1.1 and later).
_PATTERN_KIND = "gitignore"


@dataclass(frozen=True)
class Glob:
    """One ``.gitignore``-style glob, compiled with ``pathspec`` (git's wildmatch rules).

    A leading ``!`` or ``#`` is taken literally (a glob names files to pick, it is neither a
    negation nor a comment); surrounding whitespace is dropped.
    """

    text: str
    spec: Any = field(compare=False, repr=False)

    @classmethod
    def compile(cls, text: str) -> Glob:
        import pathspec  # only runs that pass --include/--exclude pay for it

        pattern = text.strip()
        if not pattern:
            raise ValueError("empty glob")
        if not pattern.strip("/"):
            raise ValueError(f"glob matches nothing: {text!r}")
        if pattern[0] in "!#":
            pattern = "\\" + pattern
        try:
            spec = pathspec.PathSpec.from_lines(_PATTERN_KIND, [pattern])
        except Exception as error:  # pathspec's own error types differ between releases
            raise ValueError(f"{text!r}: {error}") from None
        return cls(text, spec)

    def matches(self, relative: str, is_dir: bool) -> bool:
        """Whether the glob matches ``relative`` (posix, no leading ``/``) or a parent of it."""
        return self.spec.match_file(relative + "/" if is_dir else relative)


@dataclass(frozen=True)
class FileFilter:
    """The include/exclude globs of one run."""

    include: tuple[Glob, ...] = ()
    exclude: tuple[Glob, ...] = ()

    @classmethod
    def from_globs(cls, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> FileFilter:
        try:
            return cls(
                tuple(Glob.compile(text) for text in include),
                tuple(Glob.compile(text) for text in exclude),
            )
        except (ValueError, re.error) as error:
            raise FileCollectionError(f"invalid glob: {error}") from None

    def excluded(self, relative: str, is_dir: bool = False) -> bool:
        return any(glob.matches(relative, is_dir=is_dir) for glob in self.exclude)

    def keeps(self, relative: str) -> bool:
        if self.excluded(relative):
            return False
        return not self.include or any(g.matches(relative, is_dir=False) for g in self.include)


def collect_files(
    paths: Sequence[str | os.PathLike[str]],
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    force_exclude: bool = False,
    keep_missing: bool = False,
    unreadable: dict[str, str] | None = None,
) -> list[str]:
    """The files to process for ``paths``, sorted by path components, each once.

    Paths keep the spelling of the argument they were found under (``src`` gives
    ``src/pkg/mod.py``).  Raises ``FileCollectionError`` naming the first path that does not
    exist, unless ``keep_missing``: then such a path is returned as a file, for the caller to
    report when it fails to read it.  ``unreadable``: filled with the directories that could
    not be listed and the entries that point nowhere (path in the argument's spelling ->
    reason); those paths are also in the returned list.
    """
    file_filter = FileFilter.from_globs(include, exclude)
    _is_venv.cache_clear()
    for raw in paths:
        if not keep_missing and not os.path.lexists(raw):
            raise FileCollectionError(f"{os.fspath(raw)}: no such file or directory")
    found: dict[str, str] = {}
    for raw in paths:
        path = os.path.normpath(os.fspath(raw))
        if os.path.isdir(path):
            real_prefix = os.path.join(os.path.realpath(path), "")
            prefix = "" if path == "." else os.path.join(path, "")
            problems: dict[str, str] = {}
            for relative in _files_in_directory(path, file_filter, problems):
                found.setdefault(real_prefix + relative, prefix + relative)
            for relative, reason in problems.items():
                shown = prefix + relative if relative != "." else path
                found.setdefault(real_prefix + relative, shown)
                if unreadable is not None:
                    unreadable[shown] = reason
        elif os.path.isfile(path) or keep_missing:
            if force_exclude and _explicit_file_excluded(path, file_filter):
                continue
            found.setdefault(os.path.realpath(path), path)
        else:
            raise FileCollectionError(f"{path}: not a regular file or directory")
    return sorted(found.values(), key=lambda file: file.split(os.sep))


def _explicit_file_excluded(path: str, file_filter: FileFilter) -> bool:
    relative = _relative_to_cwd(path)
    if any(_skipped_dir_name(part) for part in relative.split("/")[:-1]):
        return True
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        if _is_venv(parent):
            return True
        above = os.path.dirname(parent)
        if above == parent:
            break
        parent = above
    return file_filter.excluded(relative)


def _relative_to_cwd(path: str) -> str:
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, cwd).replace(os.sep, "/")
    return absolute.replace(os.sep, "/").lstrip("/")


def _files_in_directory(
    root: str, file_filter: FileFilter, problems: dict[str, str]
) -> Iterator[str]:
    """Relative (posix) paths of the Python files below ``root`` that the filter keeps; the
    directories that could not be listed go to ``problems`` (relative path -> reason) unless
    an exclude glob drops them."""
    found: dict[str, str] = {}
    relatives = _git_listing(root, found)
    if relatives is None:
        found.clear()
        relatives = _walk(root, found)
    for relative, reason in found.items():
        if relative == "." or not file_filter.excluded(relative, is_dir=True):
            problems[relative if os.sep == "/" else relative.replace("/", os.sep)] = reason
    for relative in relatives:
        if relative.endswith(PYTHON_SUFFIXES) and file_filter.keeps(relative):
            yield relative if os.sep == "/" else relative.replace("/", os.sep)


#: git's warning for a directory it cannot list (``dir.c``: "could not open directory '%s'").
_GIT_UNREADABLE = re.compile(r"could not open directory '(?P<path>.*)': (?P<reason>.*)$")


def git_unreadable(stderr: str) -> dict[str, str]:
    """The directories git says it could not open (relative, posix, no trailing ``/``)."""
    found = {}
    for line in stderr.splitlines():
        match = _GIT_UNREADABLE.search(line)
        if match:
            relative = match["path"].rstrip("/") or "."
            found[relative] = f"cannot list directory: {match['reason'].strip().lower()}"
    return found


def _git_listing(root: str, problems: dict[str, str]) -> list[str] | None:
    """Paths below ``root`` (relative, posix) that git does not ignore, or ``None`` when
    ``root`` is not inside a git work tree (or is itself ignored, or git is missing);
    directories git could not open go to ``problems``.  A listed symlink that leads nowhere
    (dangling, or a loop) is kept: reading it names the problem."""
    command = ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "."]
    try:
        listing = subprocess.run(
            command, cwd=root, capture_output=True, check=False, env=_git_env()
        )
    except OSError:
        return None
    if listing.returncode != 0:
        return None
    names = [os.fsdecode(name) for name in listing.stdout.split(b"\0") if name]
    if not names and _git_ignores(root):
        return None
    problems.update(git_unreadable(os.fsdecode(listing.stderr)))
    kept = []
    for name in names:
        parts = name.split("/")
        if any(_skipped_dir_name(part) for part in parts[:-1]):
            continue
        if any(_is_venv(os.path.join(root, *parts[:depth])) for depth in range(1, len(parts))):
            continue
        if os.path.isfile(os.path.join(root, name)):  # tracked but deleted, or a submodule
            kept.append(name)
        elif os.path.islink(os.path.join(root, name)):  # dangling or a loop: its read says so
            kept.append(name)
    return kept


def _git_ignores(root: str) -> bool:
    check = subprocess.run(
        ["git", "check-ignore", "-q", "--", "."], cwd=root, capture_output=True, env=_git_env()
    )
    return check.returncode == 0


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GIT_OPTIONAL_LOCKS", "0")  # a read-only listing must not take index.lock
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):  # set by git hooks
        env.pop(name, None)
    return env


def _walk(root: str, problems: dict[str, str]) -> list[str]:
    """Every file below ``root`` (relative, posix), skipped directories left out; a directory
    that cannot be listed goes to ``problems``."""
    found: list[str] = []

    def unlistable(error: OSError) -> None:
        where = os.path.relpath(error.filename or root, root).replace(os.sep, "/")
        reason = error.strerror.lower() if error.strerror else type(error).__name__
        problems[where] = f"cannot list directory: {reason}"

    for directory, subdirectories, files in os.walk(root, onerror=unlistable):
        subdirectories[:] = [
            name
            for name in subdirectories
            if not _skipped_dir_name(name) and not _is_venv(os.path.join(directory, name))
        ]
        relative_dir = os.path.relpath(directory, root)
        prefix = "" if relative_dir == "." else relative_dir.replace(os.sep, "/") + "/"
        found.extend(prefix + name for name in files)  # a dangling link fails its read
    return found


def _skipped_dir_name(name: str) -> bool:
    return name in SKIPPED_DIR_NAMES


@lru_cache(maxsize=4096)
def _is_venv(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, VENV_MARKER))
