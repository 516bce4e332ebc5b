"""An open editor buffer whose syntax tree follows edits incrementally (tree.edit + parse(old))."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tree_sitter as ts

from .languages import LanguageSpec, parser


@dataclass(frozen=True, slots=True)
class TextEdit:
    """An LSP-style range replacement. Characters are Python str indices (not UTF-16)."""

    start_line: int
    start_character: int
    end_line: int
    end_character: int
    text: str


class Buffer:
    def __init__(self, spec: LanguageSpec, text: str) -> None:
        self.spec = spec
        self.text = text
        self.tree: ts.Tree = parser(spec).parse(text.encode("utf-8"))
        self.version = 0

    def replace(self, new_text: str) -> None:
        """New full text: re-parse only the changed span (common prefix/suffix kept)."""
        old = self.text
        if new_text == old:
            return
        limit = min(len(old), len(new_text))
        start = 0
        while start < limit and old[start] == new_text[start]:
            start += 1
        end_old, end_new = len(old), len(new_text)
        while end_old > start and end_new > start and old[end_old - 1] == new_text[end_new - 1]:
            end_old -= 1
            end_new -= 1
        self._edit(start, end_old, new_text[start:end_new])
        self._reparse()

    def apply(self, edits: Sequence[TextEdit]) -> None:
        """Apply edits in order (as LSP didChange content changes are), then re-parse once."""
        for edit in edits:
            start = self._offset(edit.start_line, edit.start_character)
            end = self._offset(edit.end_line, edit.end_character)
            self._edit(start, max(start, end), edit.text)
        self._reparse()

    # -- internals -----------------------------------------------------------------------------
    def _offset(self, line: int, character: int) -> int:
        text = self.text
        pos = 0
        for _ in range(max(0, line)):
            nl = text.find("\n", pos)
            if nl < 0:
                return len(text)
            pos = nl + 1
        line_end = text.find("\n", pos)
        line_end = len(text) if line_end < 0 else line_end
        return min(pos + max(0, character), line_end)

    def _point(self, offset: int) -> tuple[int, int, int]:
        """(byte offset, row, byte column) of a str offset in the current text."""
        text = self.text
        row = text.count("\n", 0, offset)
        line_start = text.rfind("\n", 0, offset) + 1
        column = len(text[line_start:offset].encode("utf-8"))
        byte = len(text[:line_start].encode("utf-8")) + column
        return byte, row, column

    def _edit(self, start: int, old_end: int, new: str) -> None:
        start_byte, start_row, start_col = self._point(start)
        old_end_byte, old_end_row, old_end_col = self._point(old_end)
        new_bytes = new.encode("utf-8")
        lines = new.count("\n")
        if lines:
            new_end_row = start_row + lines
            new_end_col = len(new[new.rfind("\n") + 1 :].encode("utf-8"))
        else:
            new_end_row, new_end_col = start_row, start_col + len(new_bytes)
        self.tree.edit(
            start_byte=start_byte,
            old_end_byte=old_end_byte,
            new_end_byte=start_byte + len(new_bytes),
            start_point=(start_row, start_col),
            old_end_point=(old_end_row, old_end_col),
            new_end_point=(new_end_row, new_end_col),
        )
        self.text = self.text[:start] + new + self.text[old_end:]

    def _reparse(self) -> None:
        self.tree = parser(self.spec).parse(self.text.encode("utf-8"), self.tree)
        self.version += 1
