"""Decide, from a file's raw bytes, whether it can contain a hook call site.

Parsing a file with LibCST costs about a thousand times more than searching its bytes, and in
a typical tree only a few files in a thousand mention a capture hook.  ``Prefilter.needs_parse``
lets the engine parse only those.

Why it is safe (it never drops a file discovery would report a call site in)
-----------------------------------------------------------------------------
Discovery (:mod:`codemods.callers.analyse`) reports a call site only where a hook's name is spelled
out in the module: as the attribute or name being called (``model.set_x_layers_to_capture(ids)``,
``Model.set_x_layers_to_capture(model, ids)``), as an attribute stored in a variable, or as a
string literal whose value is the name, written out within one literal
(``getattr(obj, "set_x_layers_to_capture")``, a dict or a tuple of names that a lookup or a
loop picks from).  Names assembled from escapes or from implicitly concatenated pieces, or
built at run time, are not recognised, by design.  The names it knows are the catalog's and
the user's ``--hook`` names.

1. *The text of the name is in the bytes.*  An identifier or a literal as above is stored in
   the file as its own characters.  In UTF-8 and in every encoding where ASCII characters
   encode as themselves and never appear inside the encoding of a non-ASCII character
   (``_ASCII_TRANSPARENT``), an ASCII name is therefore a byte substring of the file.  A file
   whose coding cookie declares any other encoding (``utf-7``, ``unicode_escape``...) is
   decoded and its text searched instead.
2. *f-strings.*  Discovery also takes ``getattr(obj, f"set_{kind}_layers_to_capture")`` as
   a call of every hook of the hook form the f-string can spell, but only when its last part
   is text ending in ``_layers_to_capture``.  That text follows the last replacement field's
   ``}`` and ends at the closing quote, and can only hold name characters, so such a file
   contains the bytes ``}[a-z0-9_]*_layers_to_capture`` followed by a quote, and always passes
   (``_FSTRING_HOOK_TAIL``).
3. *Stage one* passes a file that contains ``set_``...``_layers_to_capture`` (the byte regex
   ``set_[a-z0-9_]+_layers_to_capture``: every catalog name and every name of the hook form) or
   one of the user's other hook names.  By 1, any file with a call site passes.
4. *Stage two* (``sharp=True``, the default) first decides the bytes: a file that does not
   decode in its declared encoding (UTF-8 without a cookie) or holds a NUL byte is passed, so
   the parser names it (a stray ``#`` byte in a binary file is no comment).  Then it drops
   the file when every occurrence found by stage one is *inert*, i.e. cannot be part of a
   reported call site:

   * a **comment**: a ``#`` precedes it on its line and no quote does (without a quote the
     ``#`` starts a comment, or lies in a string still open at the occurrence);
   * a **definition's name**: exactly the identifier after ``def``/``async def`` at the start
     of its line, followed by ``(``;
   * the **name asked about by** ``hasattr(obj, "NAME")``: exactly a string literal right
     after ``hasattr(<expression without brackets, strings or comments>,`` and right before
     ``)``; such a literal is no getattr name, no element of a dict, tuple or list and no
     assigned value, so discovery never resolves it;
   * a **self-delegation**: an attribute called on the spot (``x.NAME(``) in
     ``def NAME(...)`` of its own ``NAME``, that function being its innermost scope, found by
     reading lines upwards by indentation (the first line indented less that starts with
     ``def``/``class`` must be ``def NAME(``).  Discovery never reports a call inside a hook's
     own definition (SGLang's wrapper models forward that way), and a hook called on the spot
     is stored nowhere a call elsewhere could pick it up.  The reading is trusted only when
     nothing between the two can hide structure: no multi-line string (one-line docstrings
     are fine), no backslash continuation, no lone ``\\r`` line break and no ``lambda``; a
     line that starts a definition in an unexpected way, or a continuation line indented less
     than the body that does not start with a closing bracket, stops it.  A line starting with
     ``def`` outside strings always is a definition, so these rules can only err towards
     parsing.

What discovery cannot see, the prefilter need not see; non-ASCII look-alike identifiers that
Python folds to a hook name (NFKC) are not call sites for discovery either.  A file that is
not parsed cannot fail to parse, so with the prefilter on a broken file that mentions no hook
is not reported; one that mentions a hook and cannot be decoded always is.

``tests/test_prefilter.py`` checks all of this empirically: discovery over every fixture, a
generated corpus of shapes and adversarial spellings, and the real SGLang tree when it is
cached must find no call site in any file either stage drops.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from codemods.catalog.hooks import CATALOG, HOOK_NAME_FORM

#: The hook spelling (``hooks.HOOK_NAME_FORM``), unanchored, as bytes and as text.
HOOK_FORM = re.compile(HOOK_NAME_FORM.encode())
_HOOK_FORM_TEXT = re.compile(HOOK_NAME_FORM)
#: Cheap first test: every name of the hook form contains this.
_HOOK_SUFFIX = b"_layers_to_capture"
#: PEP 263 coding cookie (only the first two lines can hold one).
_CODING_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
#: The last text part of an f-string that may spell a hook: ``}`` + the name's tail + quote.
_FSTRING_HOOK_TAIL = re.compile(rb"\}[a-z0-9_]*_layers_to_capture[\"']")
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
#: The start of a line up to a definition's keyword: indentation, then ``async`` or not.
_INDENT_ASYNC = rb"[ \t]*(?:async[ \t]+)?"
_DEF_PREFIX = re.compile(_INDENT_ASYNC + rb"def[ \t]+\Z")
_OPEN_PAREN = re.compile(rb"[ \t]*\(")
_CLOSING_PAREN = re.compile(rb"[ \t\r\n]*\)")
#: ``hasattr(<expression without brackets, strings or comments>,`` just before a literal.
_HASATTR_OPENING = re.compile(rb"(?<![A-Za-z0-9_.])hasattr[ \t]*\([^()\[\]{}\"'#=\\]*,[ \t\r\n]*\Z")
#: A line that opens a scope, and the ``def NAME(`` form of one.
_SCOPE_KEYWORD = re.compile(_INDENT_ASYNC + rb"(?:def|class)\b")
_SCOPE_HEADER = re.compile(_INDENT_ASYNC + rb"def[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(")


@dataclass(frozen=True)
class Prefilter:
    """The text test for one run's hook names."""

    #: User hook names that do not have the hook form (those that do are always covered).
    extra_names: tuple[str, ...] = ()
    #: Apply stage two (drop files whose only mentions are definitions).
    sharp: bool = True
    _extra_needles: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _all_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(
            dict.fromkeys(name for name in self.extra_names if not _HOOK_FORM_TEXT.fullmatch(name))
        )
        object.__setattr__(self, "extra_names", names)
        object.__setattr__(self, "_extra_needles", tuple(name.encode() for name in names))
        every = {hook.name for hook in CATALOG} | set(self.extra_names)
        object.__setattr__(self, "_all_names", tuple(sorted(every)))

    @classmethod
    def for_names(cls, names: Iterable[str], sharp: bool = True) -> Prefilter:
        return cls(tuple(sorted(names)), sharp)

    def needs_parse(self, data: bytes) -> bool:
        """``False`` only when the file certainly holds no call site of a known hook."""
        declared = _declared_encoding(data)
        if declared is not None and declared not in _ASCII_TRANSPARENT:
            return self._needs_parse_text(data, declared)
        if _FSTRING_HOOK_TAIL.search(data):
            return True  # f"set_{kind}_layers_to_capture" (see 2. above)
        if not self._extra_needles and _HOOK_SUFFIX not in data:
            return False
        spans = self._occurrences(data)
        if not spans:
            return False
        if not self.sharp or not _plain_text(data, declared):
            return True  # bytes first: the parser names a file it cannot read (see 4.)
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


def _plain_text(data: bytes, declared: str | None) -> bool:
    """Whether ``data`` decodes in its declared encoding (UTF-8 without a cookie) and holds
    no NUL byte: only then can a ``#`` or a ``def`` in it be read as Python's."""
    if b"\x00" in data:
        return False
    try:
        data.decode(declared or "utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
    """An occurrence discovery cannot report: a comment, a definition's name, the name
    argument of ``hasattr``, or a self-delegating call."""
    return (
        _is_comment(data, start)
        or _is_definition_name(data, start, end)
        or _is_hasattr_name(data, start, end)
        or _is_delegation(data, start, end)
    )


def _is_hasattr_name(data: bytes, start: int, end: int) -> bool:
    """The occurrence is exactly the string literal ``hasattr(obj, "NAME")`` asks about.

    Such a literal is no getattr name, no element of a dict, tuple or list, and no value
    assigned to anything, so discovery never resolves it."""
    if start == 0 or end >= len(data):
        return False
    quote = data[start - 1 : start]
    if quote not in (b'"', b"'") or data[end : end + 1] != quote:
        return False
    if not _CLOSING_PAREN.match(data, end + 1):
        return False
    return _HASATTR_OPENING.search(data, max(0, start - 1 - 400), start - 1) is not None


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
    """Whether the occurrence is an attribute called on the spot (``x.NAME(``) inside
    ``def NAME(...)`` of the same ``NAME`` as its innermost function, class or lambda: a hook
    that forwards to itself elsewhere, which discovery never reports.  Being called there, the
    hook is not stored anywhere a call elsewhere could pick it up.  Any doubt (a string or a
    line continuation between the two, a ``lambda``, a nested ``class``, an unusual definition
    line) answers ``False``."""
    if start == 0 or data[start - 1 : start] != b"." or not _OPEN_PAREN.match(data, end):
        return False
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
        if line_width >= width or stripped[:1] in (b")", b"]", b"}"):
            continue  # deeper, or the tail of a bracketed construct: never a statement start
        width = line_width
        if _SCOPE_KEYWORD.match(line):
            header = _SCOPE_HEADER.match(line)
            return (
                header is not None and header.group(1) == name and _plain(data, previous_start, end)
            )
    return False


def _plain(data: bytes, start: int, end: int) -> bool:
    """Nothing in ``data[start:end]`` that could hide structure from a line-by-line reading:
    no line continuation, no lone carriage return (an old-style line break), no ``lambda``,
    and triple quotes only in lines that open and close one string (``\"\"\"Doc.\"\"\"``),
    which leave every line before and after as much inside or outside a string as it was."""
    region = data[start:end]
    if (
        b"\\\n" in region
        or b"\\\r" in region
        or region.count(b"\r") != region.count(b"\r\n")
        or b"lambda" in region
    ):
        return False
    if b'"""' not in region and b"'''" not in region:
        return True
    for line in region.split(b"\n"):
        tokens = line.count(b'"""') + line.count(b"'''")
        if not tokens:
            continue
        text = line.strip()
        quote = text[:3]
        if tokens != 2 or quote not in (b'"""', b"'''") or not text.endswith(quote):
            return False
        if len(text) < 6:
            return False
    return True


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
