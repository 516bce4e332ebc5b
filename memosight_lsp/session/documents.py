"""LSP positions <-> offsets in a document, and the bounded window of text sent to the model.

Columns go through pygls's position codec (UTF-16 by default). Lines are split the way pygls
applies incremental edits (str.splitlines), plus the empty last line after a final newline,
where an editor cursor can sit. Out-of-range positions are clamped, never an error.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import PositionCodec

# What is sent to the model at most: the engine packs a token budget out of this window, so a
# tens-of-MB file costs no more than a small one.
MAX_CHARS_BEFORE = 120_000
MAX_CHARS_AFTER = 30_000


@dataclass(frozen=True)
class LineIndex:
    text: str
    lines: tuple[str, ...]  # with their line breaks
    starts: tuple[int, ...]  # offset of each line

    @classmethod
    def of(cls, text: str) -> LineIndex:
        lines = text.splitlines(True)
        if not lines or lines[-1][-1:] in ("\n", "\r"):
            lines.append("")
        starts, offset = [], 0
        for line in lines:
            starts.append(offset)
            offset += len(line)
        return cls(text=text, lines=tuple(lines), starts=tuple(starts))

    def content(self, line: int) -> str:
        return self.lines[line].rstrip("\r\n")

    def offset_at(self, codec: PositionCodec, position: types.Position) -> int:
        line = min(max(position.line, 0), len(self.lines) - 1)
        if position.line > line:  # past the end: the end of the document
            return len(self.text)
        content = self.content(line)
        units = min(max(position.character, 0), codec.client_num_units(content))
        column = codec.position_from_client_units([content], types.Position(0, units)).character
        return self.starts[line] + min(column, len(content))

    def line_end(self, offset: int) -> int:
        """The offset where the line holding `offset` ends, before its line break."""
        line = bisect.bisect_right(self.starts, min(max(offset, 0), len(self.text))) - 1
        return self.starts[line] + len(self.content(line))

    def position_at(self, codec: PositionCodec, offset: int) -> types.Position:
        offset = min(max(offset, 0), len(self.text))
        line = bisect.bisect_right(self.starts, offset) - 1
        column = min(offset - self.starts[line], len(self.content(line)))
        return codec.position_to_client_units(self.lines, types.Position(line, column))


@dataclass(frozen=True, kw_only=True)
class Window:
    """The part of a document around the cursor handed to the engine."""

    text: str
    start: int  # document offset of text[0]
    line: int  # cursor line within text
    column: int  # cursor str column within its line
    cursor: int  # the cursor's offset in text

    def cursor_line(self) -> tuple[str, str]:
        """The cursor's line: the part before the cursor, the part after it."""
        end = self.text.find("\n", self.cursor)
        after = self.text[self.cursor :] if end == -1 else self.text[self.cursor : end]
        return self.text[self.cursor - self.column : self.cursor], after


def window_at(text: str, offset: int) -> Window:
    start = max(0, offset - MAX_CHARS_BEFORE)
    if start > 0:  # start on a line boundary
        newline = text.find("\n", start, offset)
        start = newline + 1 if newline != -1 else start
    end = min(len(text), offset + MAX_CHARS_AFTER)
    if end < len(text):
        newline = text.rfind("\n", offset, end)
        end = newline if newline != -1 else end
    window = sanitize(text[start:end])
    cursor = offset - start
    line_start = window.rfind("\n", 0, cursor) + 1
    return Window(
        text=window,
        start=start,
        line=window.count("\n", 0, cursor),
        column=cursor - line_start,
        cursor=cursor,
    )


def sanitize(text: str) -> str:
    """Lone surrogates (from invalid UTF-16 in JSON) become '?': tokenizers need valid UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
