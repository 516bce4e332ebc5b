"""Each buffer's recent edits, for next-edit prediction: what the user just changed, as
(old text, new text, where), bounded.

The server hands every buffer's text after each change (`changed`); the edit is what differs
from the text before (one span: the common prefix and suffix are cut off). Typing through one
place makes one edit, not one per keystroke: an edit inside or at the end of the previous one's
new text is merged into it, and a merged edit that gives the old text back (typed and erased)
is forgotten. A buffer keeps MAX_EDITS edits; MAX_BUFFERS buffers are kept, the least recently
edited dropped first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

MAX_EDITS = 8
MAX_BUFFERS = 64
MAX_EDIT_CHARS = 4000  # a bigger change (a paste, a reformat) is kept cut to this, each side
_CHUNK = 4096


@dataclass(frozen=True, kw_only=True)
class Edit:
    """One change: `old` became `new` at offset `start` (of the text before it), on `line`
    (0-based). `before` / `after`: the whole lines it touched, before and after it."""

    start: int
    old: str
    new: str
    line: int
    before: str
    after: str

    def lines(self) -> tuple[list[str], list[str]]:
        return self.before.splitlines(), self.after.splitlines()


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of a and b (in C-speed chunks, then characters)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i : i + _CHUNK] == b[i : i + _CHUNK]:
        i += _CHUNK
    i = min(i, n)  # the first difference is within the chunk at i
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the common suffix of a and b, at most `limit`."""
    n = min(len(a), len(b), limit)
    i = 0
    la, lb = len(a), len(b)
    while i + _CHUNK <= n and a[la - i - _CHUNK : la - i] == b[lb - i - _CHUNK : lb - i]:
        i += _CHUNK
    while i < n and a[la - i - 1] == b[lb - i - 1]:
        i += 1
    return i


def diff_span(old_text: str, new_text: str) -> tuple[int, str, str] | None:
    """(start, old, new): the one span where the texts differ; None if they are equal."""
    if old_text == new_text:
        return None
    start = common_prefix(old_text, new_text)
    limit = min(len(old_text), len(new_text)) - start
    end = common_suffix(old_text, new_text, limit)
    return start, old_text[start : len(old_text) - end], new_text[start : len(new_text) - end]


def whole_lines(text: str, start: int, end: int) -> tuple[int, str]:
    """(line number, text) of the lines that hold text[start:end], without the last newline."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    last = len(text) if last == -1 else last
    return text.count("\n", 0, first), text[first:last]


def changed_line(text: str, edits: Sequence[Edit]) -> tuple[int, list[str], str] | None:
    """(offset of the line, its texts before the last edits on it, the longest run first, its
    text now) when the last edit changed one line that the document still holds as it left it."""
    last = edits[-1]
    now = last.after
    line_start = text.rfind("\n", 0, last.start) + 1
    line_end = line_start + len(now)
    if "\n" in now or "\n" in last.before or text[line_start:line_end] != now:
        return None
    if text[line_end : line_end + 1] not in ("", "\n", "\r"):
        return None  # the line was cut (MAX_EDIT_CHARS)
    befores = [last.before]
    for earlier, later in zip(reversed(edits[:-1]), reversed(edits[1:]), strict=True):
        if earlier.line != later.line or earlier.after != later.before or "\n" in earlier.before:
            break
        befores.append(earlier.before)
    return line_start, befores[::-1], now


class EditHistory:
    """Recent edits per buffer (see the module doc). Called on the event loop only."""

    def __init__(self, max_edits: int = MAX_EDITS, max_buffers: int = MAX_BUFFERS) -> None:
        self.max_edits = max_edits
        self.max_buffers = max_buffers
        self._texts: dict[str, str] = {}
        self._edits: dict[str, list[Edit]] = {}

    def opened(self, uri: str, text: str) -> None:
        self._texts[uri] = text
        self._edits.setdefault(uri, [])
        self._bound()

    def closed(self, uri: str) -> None:
        self._texts.pop(uri, None)
        self._edits.pop(uri, None)

    def recent(self, uri: str) -> list[Edit]:
        """The buffer's edits, oldest first."""
        return list(self._edits.get(uri, ()))

    def changed(self, uri: str, text: str) -> Edit | None:
        """The buffer's text after a change; returns the edit recorded (merged or new)."""
        old_text = self._texts.get(uri)
        self._texts[uri] = text
        edits = self._edits.pop(uri, [])
        self._edits[uri] = edits  # most recently edited last
        self._bound()
        if old_text is None:
            return None
        span = diff_span(old_text, text)
        if span is None:
            return None
        start, old, new = span
        merged = self._merge(edits[-1], start, old, new, text) if edits else None
        if merged is not None:
            edits.pop()
            if merged.old == merged.new:  # typed and erased again
                return None
            edits.append(merged)
            return merged
        line, before = whole_lines(old_text, start, start + len(old))
        _, after = whole_lines(text, start, start + len(new))
        edit = Edit(
            start=start,
            old=old[:MAX_EDIT_CHARS],
            new=new[:MAX_EDIT_CHARS],
            line=line,
            before=before[:MAX_EDIT_CHARS],
            after=after[:MAX_EDIT_CHARS],
        )
        edits.append(edit)
        del edits[: -self.max_edits]
        return edit

    @staticmethod
    def _merge(last: Edit, start: int, old: str, new: str, text: str) -> Edit | None:
        """`last` with this change folded in, when the change lies within last's new text
        (typing on at its end, erasing back into it); None otherwise."""
        offset = start - last.start
        if offset < 0 or offset + len(old) > len(last.new):
            return None
        if len(last.new) >= MAX_EDIT_CHARS:
            return None
        merged_new = last.new[:offset] + new + last.new[offset + len(old) :]
        _, after = whole_lines(text, last.start, last.start + len(merged_new))
        return replace(last, new=merged_new, after=after[:MAX_EDIT_CHARS])

    def _bound(self) -> None:
        while len(self._edits) > self.max_buffers:
            oldest = next(iter(self._edits))
            self.closed(oldest)
