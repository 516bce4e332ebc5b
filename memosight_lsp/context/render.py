"""Text of a definition at each level of detail: in full, or as a stub (header + docstring, and
for classes the headers of their members)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from memosight_lsp.workspace import Definition, FileSymbols

MAX_DOC_LINES = 6
MAX_MEMBERS = 10
_QUOTES = ('"""', "'''")
_CONSTRUCTORS = frozenset({"__init__", "constructor", "new"})
_OPEN_SPACE = re.compile(r"([(\[{]) ")
_CLOSE_SPACE = re.compile(r",? ([)\]}])")
_COMMENT = re.compile(r"#|//|/\*").search


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def join_lines(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


@functools.lru_cache(maxsize=128)
def split_lines(text: str) -> list[str]:
    """A file's lines, memoised: other files' texts come back unchanged on every keystroke.
    The list is shared: read it, never change it."""
    return text.split("\n")


def render_full(lines: list[str], d: Definition) -> str:
    return join_lines(lines[d.first_line : d.end_line + 1])


def _doc_lines(lines: list[str], d: Definition, python: bool) -> list[str]:
    if d.doc_start < 0:
        return []
    doc = lines[d.doc_start : d.doc_end + 1]
    if len(doc) <= MAX_DOC_LINES:
        return doc
    # Cut a long docstring / comment but keep it well-formed, so the model is not misled.
    head = doc[: MAX_DOC_LINES - 1]
    if python:
        opener = head[0].lstrip().lstrip("rRbBuUfF")[:3]
        quote = opener if opener in _QUOTES else '"""'
        indent = _indentation(head[0])
        return [*head, indent + quote]
    if head[0].lstrip().startswith("/*"):
        indent = _indentation(head[0])
        return [*head, indent + " */"]
    return head


def _header_lines(
    lines: list[str], d: Definition, python: bool, stub: bool = True, compact: bool = False
) -> list[str]:
    header = list(lines[d.start_line : d.sig_end_line + 1])
    if compact:
        header = _one_line(header)
    if not header or not stub:
        return header
    last = header[-1].rstrip()
    if d.kind in ("constant", "type"):
        return header
    if python and last.endswith(":"):
        header[-1] = last + " ..."
    elif not python and last.endswith("{"):
        header[-1] = last + " ... }"
    return header


def _one_line(header: list[str]) -> list[str]:
    """A signature spread over several lines (one parameter per line) joined into one: the
    same names and types for about two thirds of the tokens. Decorator lines stay as they are."""
    first = 0
    while first < len(header) - 1 and header[first].lstrip().startswith("@"):
        first += 1
    if len(header) - first <= 1 or any(_COMMENT(part) for part in header[first:]):
        return header  # a comment would swallow the rest of the joined line
    indent = _indentation(header[first])
    joined = " ".join(part.strip() for part in header[first:] if part.strip())
    joined = _OPEN_SPACE.sub(r"\1", joined)
    joined = _CLOSE_SPACE.sub(r"\1", joined)
    return [*header[:first], indent + joined]


# How much of a definition a stub shows, least first.
HEADER = 1  # the header alone, joined onto one line
CONSTRUCTOR = 2  # ... and for types, how to construct one
DOCUMENTED = 3  # header, docstring / leading comment, and for types their members' headers


def render_signature(
    lines: list[str], symbols: FileSymbols, index: int, *, detail: int = DOCUMENTED
) -> str:
    """A stub of the definition at the given detail (HEADER, CONSTRUCTOR or DOCUMENTED)."""
    d = symbols.definitions[index]
    python = symbols.language == "python"
    docs = detail >= DOCUMENTED
    out: list[str] = []
    doc = _doc_lines(lines, d, python) if docs else []
    before_header = d.doc_start >= 0 and d.doc_start < d.start_line
    if before_header:
        out.extend(doc)
    members = _members(symbols, index) if detail > HEADER else []
    if detail == CONSTRUCTOR:
        members = [m for m in members if m.name in _CONSTRUCTORS]
    # A docstring is a valid body on its own; only a bare header needs the `...` stub.
    bare = not members and not (doc and not before_header and python)
    header = _header_lines(lines, d, python, stub=bare, compact=not docs)
    out.extend(header)
    if doc and not before_header:
        out.extend(doc)
    if members:
        for member in members:
            out.extend(_header_lines(lines, member, python, compact=not docs))
        if not python and header and not header[-1].rstrip().endswith("}"):
            indent = _indentation(header[0])
            out.append(indent + "}")
    return join_lines(out)


def _members(symbols: FileSymbols, index: int) -> Sequence[Definition]:
    """Members shown in a type's stub: fields and the constructor first, then public methods,
    private ones last; at most MAX_MEMBERS, in source order."""
    members = symbols.members(index)
    if len(members) <= MAX_MEMBERS:
        return members

    def rank(m: Definition) -> int:
        if m.kind == "constant" or m.name in _CONSTRUCTORS:
            return 0
        return 2 if m.name.startswith("_") else 1

    keep = sorted(members, key=lambda m: (rank(m), m.start_line))[:MAX_MEMBERS]
    return sorted(keep, key=lambda m: m.start_line)


def render_head(lines: list[str], d: Definition, python: bool) -> str:
    """The top of an enclosing definition: header and docstring, as they appear in the file."""
    out = list(lines[d.start_line : d.sig_end_line + 1])
    if d.doc_start > d.sig_end_line:
        out.extend(_doc_lines(lines, d, python))
    return join_lines(out)
