"""LSP positions count UTF-16 code units; Python strings count code points."""

from __future__ import annotations


def utf16_to_index(line_text: str, character: int) -> int:
    """The str index of an LSP character offset in line_text, clamped to the line."""
    units = 0
    for index, ch in enumerate(line_text):
        if units >= character:
            return index
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(line_text)


def index_to_utf16(line_text: str, index: int) -> int:
    return sum(2 if ord(ch) > 0xFFFF else 1 for ch in line_text[:index])


def split_at(text: str, line: int, column: int) -> tuple[str, str]:
    """(text before, text after) the cursor at 0-based line and str column, both clamped."""
    lines = text.split("\n")
    line = max(0, min(line, len(lines) - 1))
    column = max(0, min(column, len(lines[line])))
    offset = sum(len(row) + 1 for row in lines[:line]) + column
    return text[:offset], text[offset:]
