"""Decide, from a file's raw bytes, whether it can contain a hook call site.

Parsing a file with LibCST costs about a thousand times more than searching its bytes, and in
a typical tree only a few files in a thousand mention a capture hook.  ``Prefilter.needs_parse``
lets the engine parse only those.

Why it is safe (it never drops a file discovery would report a call site in)
-----------------------------------------------------------------------------
Discovery (:mod:`codemods.discover`) reports a call site only where a hook's name is spelled
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
   a call of every hook the f-string can spell (its text parts, ``.+`` per field), so a file
   holding ``getattr`` and an f-string that can spell a hook and can reach getattr (an
   argument near ``getattr(``, or assigned to a name that is a ``getattr`` argument) always
   passes (``Prefilter._fstring_may_name_a_hook``).
3. *Stage one* passes a file that contains ``set_``...``_layers_to_capture`` (the byte regex
   ``set_[a-z0-9_]+_layers_to_capture``: every catalog name and every name of the hook form) or
   one of the user's other hook names.  By 1, any file with a call site passes.
4. *Stage two* (``sharp=True``, the default) then drops the file when every occurrence found
   by stage one is *inert*, i.e. cannot be part of a reported call site:

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
is not reported.

``tests/test_prefilter.py`` checks all of this empirically: discovery over every fixture, a
generated corpus of shapes and adversarial spellings, and the real SGLang tree when it is
cached must find no call site in any file either stage drops.
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
_IDENTIFIER_OR_DOT = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_IDENTIFIER_BYTE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_DEF_PREFIX = re.compile(rb"[ \t]*(?:async[ \t]+)?def[ \t]+\Z")
_OPEN_PAREN = re.compile(rb"[ \t]*\(")
_CLOSING_PAREN = re.compile(rb"[ \t\r\n]*\)")
#: ``hasattr(<expression without brackets, strings or comments>,`` just before a literal.
_HASATTR_OPENING = re.compile(
    rb"(?<![A-Za-z0-9_.])hasattr[ \t]*\([^()\[\]{}\"'#=\\]*,[ \t\r\n]*\Z"
)
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
    _all_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = tuple(
            dict.fromkeys(
                name for name in self.extra_names if not _HOOK_FORM_TEXT.fullmatch(name)
            )
        )
        object.__setattr__(self, "extra_names", names)
        object.__setattr__(self, "_extra_needles", tuple(name.encode() for name in names))
        from codemods.hooks import CATALOG  # data only

        every = {hook.name for hook in CATALOG} | set(self.extra_names)
        object.__setattr__(self, "_all_names", tuple(sorted(every)))

    @classmethod
    def for_names(cls, names: Iterable[str], sharp: bool = True) -> "Prefilter":
        return cls(tuple(sorted(names)), sharp)

    def needs_parse(self, data: bytes) -> bool:
        """``False`` only when the file certainly holds no call site of a known hook."""
        declared = _declared_encoding(data)
        if declared is not None and declared not in _ASCII_TRANSPARENT:
            return self._needs_parse_text(data, declared)
        if self._fstring_may_name_a_hook(data):
            return True
        if not self._extra_needles and _HOOK_SUFFIX not in data:
            return False
        spans = self._occurrences(data)
        if not spans:
            return False
        if not self.sharp:
            return True
        return not all(_is_inert(data, start, end) for start, end in spans)

    def _fstring_may_name_a_hook(self, data: bytes) -> bool:
        """Whether a getattr name written as an f-string could spell a hook.

        Discovery treats ``getattr(obj, f"set_{kind}_layers_to_capture")`` as a call of every
        hook whose name the f-string's text parts and fields can spell (``.+`` per field), so
        a file with ``getattr`` and such an f-string must be parsed even when no name is
        written out.  Only an f-string that can reach getattr counts: a value assigned to a name
        (discovery follows names to their assigned values) or an argument near ``getattr``;
        one the scan cannot read plainly counts as matching."""
        if b"getattr" not in data or not _getattr_takes_a_computed_name(data):
            return False
        names = self._all_names
        for prefix_start, body_start, quote in _fstring_starts(data):
            parts = _fstring_parts(data, body_start, quote)
            if parts is not None and not any(_parts_match(parts, name) for name in names):
                continue
            if _may_reach_getattr(data, prefix_start):
                return True
        return False

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


_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_TRAILING_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\Z")
_LEADING_IDENTIFIER = re.compile(rb"[ \t]*([A-Za-z_][A-Za-z0-9_]*)")
#: Keywords that start a statement and can never start a line inside brackets.
_STATEMENT_KEYWORD = re.compile(
    rb"[ \t]*(?:assert|return|raise|del|import|from|with|elif|while|except|class|def|global"
    rb"|nonlocal|pass)\b"
)
#: A second getattr argument that is a plain name or an f-string (or unclear: a prefix).
_COMPUTED_NAME_ARGUMENT = re.compile(
    rb"[ \t\r\n]*(?:[A-Za-z_][A-Za-z0-9_]*[ \t\r\n]*[,)]|[A-Za-z]{1,2}[\"\']|[\\(])"
)
_BRACE_TOKENS = re.compile(rb"(\{\{|\}\}|\{|\})")
_FSTRING_MARKS = (b'f"', b"f'", b'F"', b"F'", b'r"', b"r'", b'R"', b"R'")


def _fstring_starts(data: bytes):
    """(prefix start, body start, quote) of every f-string literal, found with plain
    ``bytes.find`` (much faster than a regex over the whole file)."""
    found = []
    for mark in _FSTRING_MARKS:
        position = data.find(mark)
        while position != -1:
            prefix_start = position
            if mark[:1] in b"rR":
                if position == 0 or data[position - 1 : position] not in (b"f", b"F"):
                    position = data.find(mark, position + 1)
                    continue
                prefix_start = position - 1
            elif position > 0 and data[position - 1 : position] in (b"r", b"R"):
                prefix_start = position - 1
            if prefix_start == 0 or data[prefix_start - 1] not in _IDENTIFIER_BYTE:
                quote_start = position + 1
                triple = data[quote_start : quote_start + 3]
                quote = triple if triple in (b'"""', b"'''") else data[quote_start : quote_start + 1]
                found.append((prefix_start, quote_start + len(quote), quote))
            position = data.find(mark, position + 1)
    return found


def _may_reach_getattr(data: bytes, start: int) -> bool:
    """Whether discovery may read the f-string starting at ``start`` as a getattr name: it
    is the second argument of ``getattr(``, or the value assigned to a plain name (``NAME =``,
    ``NAME: T =``, ``NAME :=``) that is the second argument of some ``getattr(`` in the file.
    Anything else (another call's argument, an attribute or subscript target, a keyword
    argument, ``return``, an operand, a dict value, a piece of an implicit concatenation) is
    never resolved by discovery.  Whatever the scan cannot read plainly counts as reaching."""
    index = start - 1
    while index >= 0 and data[index] in b" \t\r\n\\(":
        index -= 1
    if index < 0:
        return False
    before = data[index : index + 1]
    if before == b",":
        return _second_getattr_argument_at(data, index)
    if before != b"=" or data[index - 1 : index] in (b"=", b"!", b"<", b">"):
        return False
    line_start = data.rfind(b"\n", 0, index) + 1
    prefix = data[line_start:index].rstrip(b" \t:")
    targets = set()
    last = _TRAILING_IDENTIFIER.search(prefix)
    if last is not None and not prefix[: last.start()].rstrip().endswith(b"."):
        targets.add(last.group())
    first = _LEADING_IDENTIFIER.match(prefix)
    if first is not None:
        targets.add(first.group(1))
    return any(_is_second_getattr_argument(data, target) for target in targets)


def _getattr_takes_a_computed_name(data: bytes) -> bool:
    """Whether some ``getattr(`` call's second argument may be an f-string or a plain name
    (the only ways an f-string reaches it); a string literal or an attribute is neither.
    Most files that call getattr pass literal names, and skip the f-string scan."""
    for opening in _getattr_calls(data):
        comma = _first_top_level_comma(data, opening)
        if comma is None:
            return True
        if comma >= 0 and _COMPUTED_NAME_ARGUMENT.match(data, comma + 1):
            return True
    return False


def _getattr_calls(data: bytes) -> list[int]:
    """Where the arguments of each ``getattr(`` call start (found with ``bytes.find``)."""
    found = []
    position = data.find(b"getattr")
    while position != -1:
        if position == 0 or data[position - 1] not in _IDENTIFIER_OR_DOT:
            paren = _OPEN_PAREN.match(data, position + 7)
            if paren is not None:
                found.append(paren.end())
        position = data.find(b"getattr", position + 7)
    return found


def _second_getattr_argument_at(data: bytes, comma: int) -> bool:
    """Whether the ``,`` at ``comma`` separates the first two arguments of ``getattr(``."""
    depth = 0
    index = comma - 1
    limit = max(0, comma - 4000)
    while index >= limit:
        char = data[index : index + 1]
        if char in (b'"', b"'"):
            opening = _string_opening(data, index)
            if opening is None:
                return True  # a string that cannot be read plainly: assume the worst
            index = opening - 1
            continue
        if char in (b"#", b"\\"):
            return True  # a comment or continuation could hide brackets
        if char == b"\n" and depth == 0 and _STATEMENT_KEYWORD.match(data, index + 1):
            return False  # the comma belongs to a statement (assert x, y), not to a call
        if char in (b")", b"]", b"}"):
            depth += 1
        elif char in (b"(", b"[", b"{"):
            if depth == 0:
                return char == b"(" and data[:index].rstrip().endswith(b"getattr")
            depth -= 1
        elif char == b"," and depth == 0:
            return False  # a third or later argument
        index -= 1
    return True


def _string_opening(data: bytes, closing: int) -> int | None:
    """The opening quote of the one-line, escape-free string literal that ends at
    ``closing``; ``None`` for anything less plain (triple quotes, escapes, no opening)."""
    quote = data[closing : closing + 1]
    line_start = data.rfind(b"\n", 0, closing) + 1
    opening = data.rfind(quote, line_start, closing)
    if opening == -1 or data[opening - 1 : opening] == quote or b"\\" in data[opening:closing]:
        return None
    return opening


def _string_closing(data: bytes, opening: int) -> int | None:
    """The closing quote of the one-line, escape-free string literal opened at ``opening``."""
    quote = data[opening : opening + 1]
    line_end = data.find(b"\n", opening)
    closing = data.find(quote, opening + 1, line_end if line_end != -1 else len(data))
    if closing == -1 or closing == opening + 1 or b"\\" in data[opening:closing]:
        return None
    return closing


def _is_second_getattr_argument(data: bytes, name: bytes) -> bool:
    """Whether ``name`` appears as the bare second argument of some ``getattr(``."""
    argument = re.compile(rb"[ \t\r\n]*" + re.escape(name) + rb"[ \t\r\n]*[,)]")
    for opening in _getattr_calls(data):
        comma = _first_top_level_comma(data, opening)
        if comma is None or (comma >= 0 and argument.match(data, comma + 1)):
            return True
    return False


def _first_top_level_comma(data: bytes, start: int) -> int | None:
    """Index of the first top-level ``,`` after an opening bracket at ``start - 1``; -1 when
    the call ends first; ``None`` when a string or comment makes the reading uncertain."""
    depth = 0
    index = start
    limit = min(len(data), start + 4000)
    while index < limit:
        char = data[index : index + 1]
        if char in (b'"', b"'"):
            closing = _string_closing(data, index)
            if closing is None:
                return None
            index = closing + 1
            continue
        if char in (b"#", b"\\"):
            return None
        if char in (b"(", b"[", b"{"):
            depth += 1
        elif char in (b")", b"]", b"}"):
            if depth == 0:
                return -1
            depth -= 1
        elif char == b"," and depth == 0:
            return index
        index += 1
    return None


def _fstring_parts(data: bytes, start: int, quote: bytes) -> list[str] | None:
    """The text parts of the f-string whose body starts at ``start`` (discovery's pattern is
    these, verbatim, joined by ``.+`` per replacement field); ``None`` when it cannot be
    read plainly."""
    end = data.find(quote, start)
    if end == -1:
        return None
    body = data[start:end]
    if b"{" not in body:
        return [body.decode("utf-8", "replace")]
    if len(quote) == 1 and b"\n" in body:
        return None
    # A backslash (even one that escapes a quote and so cut the body short) stays in a text
    # part: no hook name has one, so such a part never matches, as in discovery's pattern.
    parts: list[str] = []
    text = b""
    depth = 0
    for token in _BRACE_TOKENS.split(body):
        if not token:
            continue
        if depth == 0 and token in (b"{{", b"}}"):
            text += token  # an escaped brace stays doubled in the text part
        elif token in (b"{", b"{{"):
            if depth == 0:
                parts.append(text.decode("utf-8", "replace"))
                text = b""
            depth += len(token)
        elif token in (b"}", b"}}"):
            depth -= len(token)
            if depth < 0:
                return None
        elif depth == 0:
            text += token
    if depth != 0:
        return None
    parts.append(text.decode("utf-8", "replace"))
    return parts


def _parts_match(parts: list[str], name: str) -> bool:
    """Whether ``name`` fullmatches ``parts[0] .+ parts[1] .+ ... parts[-1]``."""
    if len(parts) == 1:
        return name == parts[0]
    first, *middle, last = parts
    if not name.startswith(first) or not name.endswith(last):
        return False
    position = len(first)
    for part in middle:
        found = name.find(part, position + 1)
        if found == -1:
            return False
        position = found + len(part)
    return len(name) - len(last) >= position + 1


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
                header is not None
                and header.group(1) == name
                and _plain(data, previous_start, end)
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
