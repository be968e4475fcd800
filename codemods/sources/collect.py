"""Collect the Python files a run works on.

``collect_files(paths)`` turns the command-line paths into a sorted, de-duplicated list of
files:

* A **directory** is searched for ``*.py`` and ``*.pyi`` files, whatever its own name (a
  folder called ``plugins.py``, named or found, is walked like any other).  Inside a git work tree the
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

Each file is processed once, under one name.  A **symlink** found in a directory is not a file
of its own: when its target is processed (under its own name, or as another link), the link
is reported as a link to it; otherwise (a target outside the paths given, or one the
selection leaves out) it is not followed unless ``follow_links`` is set, and is reported.  A
symlinked directory found in a directory is never walked when its target lies inside the
paths given (its files are found under their own names) or holds them (a loop); one leading
elsewhere is walked with ``follow_links`` (each folder once), else reported.  These reports go
to ``links`` (path -> what was done with it) when the caller passes that dict.  A symlink
named on the command line is always followed, unless its target is processed under another
name.

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
    follow_links: bool = False,
    links: dict[str, str] | None = None,
) -> list[str]:
    """The files to process for ``paths``, sorted by path components, each once.

    Paths keep the spelling of the argument they were found under (``src`` gives
    ``src/pkg/mod.py``).  Raises ``FileCollectionError`` naming the first path that does not
    exist, unless ``keep_missing``: then such a path is returned as a file, for the caller to
    report when it fails to read it.  ``unreadable``: filled with the directories that could
    not be listed and the entries that point nowhere (path in the argument's spelling ->
    reason); those paths are also in the returned list.  ``follow_links`` and ``links``: see
    the module's docstring.
    """
    file_filter = FileFilter.from_globs(include, exclude)
    _is_venv.cache_clear()
    for raw in paths:
        if not keep_missing and not os.path.lexists(raw):
            raise FileCollectionError(f"{os.fspath(raw)}: no such file or directory")
    normalized = [os.path.normpath(os.fspath(raw)) for raw in paths]
    found = _Found(
        file_filter, tuple(os.path.realpath(path) for path in normalized if os.path.isdir(path))
    )
    for path in normalized:
        if os.path.isdir(path):
            found.directory(path)
        elif os.path.isfile(path) or keep_missing:
            if force_exclude and _explicit_file_excluded(path, file_filter):
                continue
            if os.path.islink(path):
                found.named_links.append(path)
            else:
                found.files.setdefault(os.path.realpath(path), path)
        else:
            raise FileCollectionError(f"{path}: not a regular file or directory")
    found.follow_directory_links(follow_links)
    chosen = found.resolve_file_links(follow_links)
    if unreadable is not None:
        unreadable.update(found.problems)
    if links is not None:
        links.update(found.notes)
    return sorted(chosen, key=lambda file: file.split(os.sep))


def _shown(path: str) -> str:
    """``path`` relative to the current directory when below it, else absolute."""
    cwd = os.path.join(os.getcwd(), "")
    return os.path.relpath(path) if path.startswith(cwd) else path


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


_NOT_FOLLOWED = "not followed (--follow-links follows it)"


@dataclass
class _Found:
    """What the paths of one run hold, gathered before symlinks are resolved: ``files``
    (real location -> path as shown), the symlinks to files found in directories and named
    on the command line, the symlinked directories found, the unlistable directories
    (``problems``) and the reports about links (``notes``)."""

    file_filter: FileFilter
    roots: tuple[str, ...]  # the real paths of the directory arguments: "the tree"
    files: dict[str, str] = field(default_factory=dict)
    walked_links: list[str] = field(default_factory=list)
    named_links: list[str] = field(default_factory=list)
    directory_links: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def directory(self, path: str) -> None:
        real_prefix = os.path.join(os.path.realpath(path), "")
        prefix = "" if path == "." else os.path.join(path, "")
        problems: dict[str, str] = {}
        folder_links: list[str] = []
        for relative in _files_in_directory(path, self.file_filter, problems, folder_links):
            if os.path.islink(prefix + relative):
                self.walked_links.append(prefix + relative)
            else:
                self.files.setdefault(real_prefix + relative, prefix + relative)
        self.directory_links.extend(prefix + relative for relative in folder_links)
        for relative, reason in problems.items():
            shown = prefix + relative if relative != "." else path
            self.files.setdefault(real_prefix + relative, shown)
            self.problems[shown] = reason

    def follow_directory_links(self, follow: bool) -> None:
        """Walk the symlinked directories leading out of the tree (``follow``), each real
        directory once, or report them; never those inside the tree or holding part of it."""
        walked = set(self.roots)
        while self.directory_links:
            link = self.directory_links.pop(0)
            target = os.path.realpath(link)
            if any(_inside(target, root) for root in walked):
                continue  # its files are found under their own names
            if any(_inside(root, target) for root in self.roots):
                self.notes[link] = (
                    f"symlink to the folder {_shown(target)}, which holds the paths given: "
                    "not followed (a loop)"
                )
            elif follow:
                walked.add(target)
                self.directory(link)
            else:
                self.notes[link] = (
                    f"symlink to the folder {_shown(target)}, outside the paths given: "
                    + _NOT_FOLLOWED
                )

    def resolve_file_links(self, follow: bool) -> list[str]:
        """The files to process: every file found under its own name, then each symlink
        whose target is not processed yet (named ones always, found ones with ``follow``);
        the other links are reported."""
        chosen = dict(self.files)
        for link in self.named_links + sorted(self.walked_links, key=lambda p: p.split(os.sep)):
            if not os.path.exists(link):  # dangling, or a loop: its read names the problem
                chosen.setdefault(os.path.abspath(link), link)
                continue
            target = os.path.realpath(link)
            owner = chosen.get(target)
            if owner is not None:
                if owner != link:
                    self.notes[link] = f"symlink to {owner}: processed once, as {owner}"
            elif follow or link in self.named_links:
                chosen[target] = link
            elif any(_inside(target, root) for root in self.roots):
                self.notes[link] = (
                    f"symlink to {_shown(target)}, which is not selected itself: " + _NOT_FOLLOWED
                )
            else:
                self.notes[link] = (
                    f"symlink to {_shown(target)}, outside the paths given: " + _NOT_FOLLOWED
                )
        return list(chosen.values())


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
    root: str, file_filter: FileFilter, problems: dict[str, str], folder_links: list[str]
) -> Iterator[str]:
    """Relative paths of the Python files below ``root`` that the filter keeps (symlinks to
    files among them); the directories that could not be listed go to ``problems`` (relative
    path -> reason) and the symlinks to directories to ``folder_links``, unless an exclude
    glob drops them."""
    found: dict[str, str] = {}
    linked: list[str] = []
    relatives = _git_listing(root, found, linked)
    if relatives is None:
        found.clear()
        linked.clear()
        relatives = _walk(root, found, linked)
    for relative, reason in found.items():
        if relative == "." or not file_filter.excluded(relative, is_dir=True):
            problems[_native(relative)] = reason
    folder_links.extend(
        _native(relative) for relative in linked if not file_filter.excluded(relative, is_dir=True)
    )
    for relative in relatives:
        if relative.endswith(PYTHON_SUFFIXES) and file_filter.keeps(relative):
            yield _native(relative)


def _native(relative: str) -> str:
    return relative if os.sep == "/" else relative.replace("/", os.sep)


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


def _git_listing(root: str, problems: dict[str, str], folder_links: list[str]) -> list[str] | None:
    """Paths below ``root`` (relative, posix) that git does not ignore, or ``None`` when
    ``root`` is not inside a git work tree (or is itself ignored, or git is missing);
    directories git could not open go to ``problems``, symlinks to directories (which git
    lists as entries of their own) to ``folder_links``.  A listed symlink that leads nowhere
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
        path = os.path.join(root, name)
        if os.path.isfile(path):  # not: tracked but deleted, or a submodule
            kept.append(name)
        elif os.path.islink(path):
            if os.path.isdir(path):
                folder_links.append(name)
            else:  # dangling or a loop: its read says so
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


def _walk(root: str, problems: dict[str, str], folder_links: list[str]) -> list[str]:
    """Every file below ``root`` (relative, posix), skipped directories left out; a directory
    that cannot be listed goes to ``problems``, a symlink to a directory (not entered) to
    ``folder_links``."""
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
        linked = [name for name in subdirectories if os.path.islink(os.path.join(directory, name))]
        folder_links.extend(prefix + name for name in linked)
    return found


def _skipped_dir_name(name: str) -> bool:
    return name in SKIPPED_DIR_NAMES


@lru_cache(maxsize=4096)
def _is_venv(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, VENV_MARKER))
