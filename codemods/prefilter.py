"""Decide, from a file's raw bytes, whether it can contain a hook call site.

Parsing a file with LibCST costs about a thousand times more than searching its bytes, and in
a typical tree only a few files in a thousand mention a capture hook.  ``Prefilter.needs_parse``
lets the engine parse only those.

Why it is safe (it never drops a file discovery would report a call site in)
-----------------------------------------------------------------------------
Discovery reports a call site only where a hook's name is spelled out in the module: as the
attribute or name being called (``model.set_x_layers_to_capture(ids)``,
``Model.set_x_layers_to_capture(model, ids)``), as an attribute stored in a variable, or as a
string literal whose value is the name (``getattr(obj, "set_x_layers_to_capture")``, a dict or
a tuple of names that a lookup or a loop picks from).  The names it knows are the catalog's and
the user's ``--hook`` names, and any name of the form ``set_<family>_layers_to_capture``.

1. *The text of the name is in the bytes.*  An identifier or a string literal without escapes
   is stored in the file as its own characters.  In UTF-8 and in every other encoding a coding
   cookie can declare where ASCII characters encode as themselves and never appear inside a
   multi-byte character's encoding of a non-ASCII character (checked below:
   ``_ASCII_TRANSPARENT``), an ASCII name is therefore a byte substring of the file.  For any
   other declared encoding (``utf-7``, ``unicode_escape``...) the file is decoded first and the
   text is searched instead.  Non-ASCII user hook names are searched as text too.
2. *Stage one:* a file passes when it contains ``set_`` ... ``_layers_to_capture`` (the byte
   regex ``set_[a-z0-9_]+_layers_to_capture``, which covers every catalog name and every name of
   the hook form) or one of the user's other hook names.  Any file discovery reports a call
   site in contains one of these, by 1.
3. *Stage two* (``sharp=True``, the default) drops a file from stage one when every occurrence
   of every needle is the name of a function *definition*: the occurrence is the whole
   identifier right after ``def`` (or ``async def``) at the start of a line, followed by
   ``(``.  A definition is not a call site, and the same text cannot at once be a definition's
   name and a call, an attribute or a string literal whose value is a hook name.  When the
   pattern is hidden in a multi-line string, the string's value still is not a hook name (it
   contains ``def``), so nothing discovery reports is lost either.  Anything that does not
   match exactly (a definition split over lines, a name in a comment or a docstring)
   keeps the file: stage two only errs towards parsing.

What discovery cannot see, the prefilter need not see: a name assembled at run time
(``"set_" + kind + "_layers_to_capture"`` with ``kind`` unknown), a name spelled with string
escapes or split over implicitly concatenated literals, and non-ASCII look-alike identifiers
that Python folds to a hook name (NFKC) are not call sites for discovery either.

``tests/test_prefilter.py`` checks all of this empirically: discovery over every fixture, a
generated corpus of all shapes (including the adversarial spellings above) and the real
SGLang tree when cached must report the same call sites with the prefilter on and off, with
and without stage two.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from typing import Iterable

#: The hook spelling as bytes (see ``hooks.HOOK_NAME_PATTERN``), unanchored.
HOOK_FORM = re.compile(rb"set_[a-z0-9_]+_layers_to_capture")
_HOOK_FORM_TEXT = re.compile(r"set_[a-z0-9_]+_layers_to_capture")
#: Cheap first test: every name of the hook form contains this.
_HOOK_SUFFIX = b"_layers_to_capture"
#: PEP 263 coding cookie (only the first two lines can hold one).
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
#: Encodings in which an ASCII string always appears in the bytes as itself.
_ASCII_TRANSPARENT = frozenset(
    codecs.lookup(name).name
    for name in (
        ["utf-8", "utf-8-sig", "ascii", "latin-1"]
        + [f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16)]
        + [f"cp125{n}" for n in range(9)]
        + ["koi8-r", "koi8-u", "mac-roman"]
    )
)
_IDENTIFIER_BYTE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DEF_PREFIX = re.compile(rb"[ \t]*(?:async[ \t]+)?def[ \t]+\Z")
_OPEN_PAREN = re.compile(rb"[ \t]*\(")
#: A line that opens a scope, and the ``def NAME(`` form of one.
_SCOPE_KEYWORD = re.compile(rb"[ \t]*(?:async[ \t]+)?(?:def|class)\b")
_SCOPE_HEADER = re.compile(rb"[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(")


@dataclass(frozen=True)
class Prefilter:
    """The text test for one run's hook names."""

    #: User hook names that do not have the hook form (those that do are always covered).
    extra_names: tuple[str, ...] = ()
    #: Apply stage two (drop files whose only mentions are definitions).
    sharp: bool = True
    _extra_needles: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(
            dict.fromkeys(
                name for name in self.extra_names if not _HOOK_FORM_TEXT.fullmatch(name)
            )
        )
        object.__setattr__(self, "extra_names", names)
        object.__setattr__(self, "_extra_needles", tuple(name.encode() for name in names))

    @classmethod
    def for_names(cls, names: Iterable[str], sharp: bool = True) -> "Prefilter":
        return cls(tuple(sorted(names)), sharp)

    def needs_parse(self, data: bytes) -> bool:
        """``False`` only when the file certainly holds no call site of a known hook."""
        declared = _declared_encoding(data)
        if declared is not None and declared not in _ASCII_TRANSPARENT:
            return self._needs_parse_text(data, declared)
        if not self._extra_needles and _HOOK_SUFFIX not in data:
            return False
        spans = self._occurrences(data)
        if not spans:
            return False
        if not self.sharp:
            return True
        return not all(_is_inert(data, start, end) for start, end in spans)

    def _occurrences(self, data: bytes) -> list[tuple[int, int]]:
        spans = []
        if _HOOK_SUFFIX in data:
            spans = [match.span() for match in HOOK_FORM.finditer(data)]
        for needle in self._extra_needles:
            start = data.find(needle)
            while start != -1:
                spans.append((start, start + len(needle)))
                start = data.find(needle, start + 1)
        return spans

    def _needs_parse_text(self, data: bytes, encoding: str) -> bool:
        """Search the decoded text of a file in an encoding that may disguise ASCII."""
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            return True  # let the parser report it
        if _HOOK_FORM_TEXT.search(text) or any(name in text for name in self.extra_names):
            return True  # stage two is not applied to such rare files
        return False


def _declared_encoding(data: bytes) -> str | None:
    """The normalised codec name of a PEP 263 cookie in the first two lines, if any."""
    first_end = data.find(b"\n")
    second_end = data.find(b"\n", first_end + 1) if first_end != -1 else -1
    head = data if second_end == -1 else data[:second_end]
    if b"coding" not in head:
        return None
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    for line in _LINE_BREAK.split(head)[:2]:
        match = _CODING_COOKIE.match(line)
        if match:
            try:
                return codecs.lookup(match.group(1).decode("ascii")).name
            except (LookupError, UnicodeDecodeError):
                return "unknown"
        if line.strip() and not line.lstrip().startswith(b"#"):
            break  # a cookie may only follow a comment or a blank line
    return None


def _is_inert(data: bytes, start: int, end: int) -> bool:
    """An occurrence discovery cannot report: a comment, a definition's name, a delegation."""
    return (
        _is_comment(data, start)
        or _is_definition_name(data, start, end)
        or _is_delegation(data, start, end)
    )


def _is_comment(data: bytes, start: int) -> bool:
    """A ``#`` before the occurrence on its line, and no quote before it on the line.

    Without a quote on the line, the ``#`` either starts a comment or lies in a string that
    is still open at the occurrence; either way the occurrence is no name or literal."""
    line_start = data.rfind(b"\n", 0, start) + 1
    prefix = data[line_start:start]
    return b"#" in prefix and b'"' not in prefix and b"'" not in prefix and b"\r" not in prefix


def _identifier_around(data: bytes, start: int, end: int) -> bytes:
    while start > 0 and data[start - 1] in _IDENTIFIER_BYTE:
        start -= 1
    while end < len(data) and data[end] in _IDENTIFIER_BYTE:
        end += 1
    return data[start:end]


def _indent_width(line: bytes) -> int | None:
    """Indentation of a line as the tokenizer counts it (tabs to multiples of 8)."""
    body = line.lstrip(b" \t")
    indent = line[: len(line) - len(body)]
    if body.startswith(b"\f"):
        return None  # a form feed resets the column: not worth modelling
    return len(indent.expandtabs(8))


def _is_delegation(data: bytes, start: int, end: int) -> bool:
    """Whether the occurrence lies inside ``def NAME(...)`` of the same ``NAME`` as its
    innermost function, class or lambda: a hook that forwards to itself elsewhere, which
    discovery never reports.  Any doubt (a string or a line continuation between the two, a
    ``lambda``, a nested ``class``, an unusual definition line) answers ``False``."""
    name = _identifier_around(data, start, end)
    line_start = data.rfind(b"\n", 0, start) + 1
    header = _SCOPE_HEADER.match(data, line_start)
    if header is not None:  # the occurrence is on the header line itself
        return header.group(1) == name and header.end() <= start and _plain(data, line_start, end)
    line_end = data.find(b"\n", start)
    width = _indent_width(data[line_start : line_end if line_end != -1 else len(data)])
    if width is None:
        return False
    position = line_start
    while position > 0 and width > 0:
        previous_start = data.rfind(b"\n", 0, position - 1) + 1
        line = data[previous_start : position - 1].rstrip(b"\r")
        position = previous_start
        stripped = line.strip()
        if not stripped or stripped.startswith(b"#"):
            continue
        line_width = _indent_width(line)
        if line_width is None:
            return False
        if line_width >= width:
            continue
        width = line_width
        if _SCOPE_KEYWORD.match(line):
            header = _SCOPE_HEADER.match(line)
            return (
                header is not None
                and header.group(1) == name
                and _plain(data, previous_start, end)
            )
    return False


def _plain(data: bytes, start: int, end: int) -> bool:
    """No multi-line string, line continuation, lone carriage return (an old-style line
    break) or lambda in ``data[start:end]``."""
    region = data[start:end]
    return not (
        b'"""' in region
        or b"'''" in region
        or b"\\\n" in region
        or b"\\\r" in region
        or region.count(b"\r") != region.count(b"\r\n")
        or b"lambda" in region
    )


def _is_definition_name(data: bytes, start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is the whole name after ``def`` at a line start."""
    if start > 0 and data[start - 1] in _IDENTIFIER_BYTE:
        return False
    if end < len(data) and data[end] in _IDENTIFIER_BYTE:
        return False
    line_start = data.rfind(b"\n", 0, start) + 1
    if not _DEF_PREFIX.match(data, line_start, start):
        return False
    return _OPEN_PAREN.match(data, end) is not None
