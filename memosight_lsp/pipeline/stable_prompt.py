"""A stable prompt head per buffer: what precedes the code near the cursor stays the same while the
user types, so a keystroke never prefills it again.

The packer (context/pack.py) lays a prompt out as a head (other files' snippets under path
markers, same-file heads, the compressed code far above) and a window (the current file's lines
from the window's first line up to the cursor), then the suffix. Packed afresh at every
keystroke, the head follows the ranking of the moment and the window's first line slides down as
the text grows; the KV prefix cache then stops at the first changed token and the whole prompt
is prefilled again (slow on a CPU: docs/latency.md). So the head and the window's first line are
pinned per buffer: the next prompt is the same head, the document from the same line to the
cursor and a fresh suffix, while the text above that line is unchanged, the cursor is below it
and the prompt fits `max_tokens`. Otherwise the context is packed again (a cold prompt, sized by
latency.py) and pinned anew.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from memosight_lsp.context import PackedContext, Snippet, suffix_window
from memosight_lsp.context.tokens import TokenCounter

MAX_BUFFERS = 32  # as many as the KV prefix cache keeps


@dataclass(frozen=True, kw_only=True)
class Pin:
    key: Hashable  # what the head was packed for (budget, index, file): must match to reuse it
    above: str  # the document before the window's first line, unchanged while the pin holds
    head: str  # the prompt before the window
    snippets: tuple[Snippet, ...]  # the head's chunks, in prompt order
    window_line: int  # the window's first line in the document
    path: str  # how the snippets name the current file
    reranked: bool
    # Lines after the cursor's the packed suffix took (-1: none at all): a suffix-first prompt
    # keeps the same ones, so it starts with the same tokens while the text after is unchanged.
    suffix_lines: int
    # Whether that suffix ran to the document's end (or nothing followed the cursor): then a
    # later cursor's suffix runs to the end too, not the same number of lines (a pin made at
    # the end of a file, by a pre-warm, would otherwise give every later prompt no suffix).
    suffix_to_end: bool


def _line_start(text: str, line: int) -> int:
    offset = 0
    for _ in range(line):
        newline = text.find("\n", offset)
        if newline == -1:
            return len(text)
        offset = newline + 1
    return offset


def _same_lines(lines: list[str], line: int, column: int, after: int) -> tuple[int, str]:
    """(last line, text) of the suffix from the cursor through `after` more lines."""
    if after < 0:
        return line, ""
    end = min(len(lines) - 1, line + after)
    rows = [lines[line][column:], *lines[line + 1 : end + 1]]
    return end, "\n".join(rows) + ("\n" if end < len(lines) - 1 else "")


def _clamped(lines: list[str], line: int, column: int) -> tuple[int, int]:
    """(line, column) inside the text, as the packer clamps them."""
    line = min(max(0, line), len(lines) - 1)
    return line, min(max(0, column), len(lines[line]))


class StablePrompts:
    """The pinned heads, least recently used buffers dropped first. One worker uses it."""

    def __init__(self, max_buffers: int = MAX_BUFFERS) -> None:
        self.max_buffers = max_buffers
        self._pins: OrderedDict[str, Pin] = OrderedDict()
        self.reused = 0  # prompts built on a pinned head
        self.packed = 0  # prompts packed afresh (and pinned)

    def context(
        self,
        buffer_id: str,
        key: Hashable,
        text: str,
        line: int,
        column: int,
        counter: TokenCounter,
        *,
        max_tokens: int,
        max_suffix: int | None,
    ) -> PackedContext | None:
        """The context on the buffer's pinned head at (line, column), None when it has to be
        packed again. The suffix takes up to `max_suffix` tokens (None: as many as when the head
        was packed, so a suffix-first prompt starts with the same lines)."""
        pin = self._pins.get(buffer_id)
        if pin is None or pin.key != key:
            return None
        start = len(pin.above)
        if not text.startswith(pin.above):
            return None
        lines = text.split("\n")
        line, column = _clamped(lines, line, column)
        if line < pin.window_line:
            return None
        cursor = _line_start(text, line) + column
        window = text[start:cursor]
        used = counter.piece(pin.head) + sum(
            counter.piece(row + "\n") for row in lines[pin.window_line : line]
        )
        used += counter.piece(lines[line][:column])
        if used > max_tokens:
            return None
        if max_suffix is None:
            after = len(lines) - 1 - line if pin.suffix_to_end else pin.suffix_lines
            end, suffix = _same_lines(lines, line, column, after)
            suffix_used = counter(suffix)
            if used + suffix_used > max_tokens:
                return None
        else:
            end, suffix, suffix_used = suffix_window(
                lines, line, column, min(max_suffix, max_tokens - used), counter
            )
        # The server's thread may forget the buffer meanwhile (it closed): it stays forgotten.
        with contextlib.suppress(KeyError):
            self._pins.move_to_end(buffer_id)
        self.reused += 1
        own = [
            Snippet(
                path=pin.path,
                start_line=pin.window_line,
                end_line=line,
                symbol=None,
                kind="prefix",
                tokens=used - counter.piece(pin.head),
                score=1.0,
                text=window,
            )
        ]
        if suffix:
            own.append(
                Snippet(
                    path=pin.path,
                    start_line=line,
                    end_line=end,
                    symbol=None,
                    kind="suffix",
                    tokens=suffix_used,
                    score=1.0,
                    text=suffix,
                )
            )
        return PackedContext(
            prefix=pin.head + window,
            suffix=suffix,
            snippets=[*pin.snippets, *own],
            prompt_tokens=used + suffix_used,
            reranked=pin.reranked,
        )

    def pin(
        self,
        buffer_id: str,
        key: Hashable,
        text: str,
        line: int,
        column: int,
        packed: PackedContext,
    ) -> None:
        """Pin the head of a context just packed at (line, column) of `text`, when its prompt
        ends with the document's lines from the window's first line to the cursor."""
        self.packed += 1
        window = next((s for s in packed.snippets if s.kind == "prefix"), None)
        self._pins.pop(buffer_id, None)
        if window is None:
            return
        start = _line_start(text, window.start_line)
        cursor = _line_start(text, line) + column
        own = text[start:cursor]
        if start > cursor or not packed.prefix.endswith(own):
            return  # the packer cut into the cursor's line: nothing stable to keep
        head = packed.prefix[: len(packed.prefix) - len(own)]
        suffix = next((s for s in packed.snippets if s.kind == "suffix"), None)
        last_line = text.count("\n")
        self._pins[buffer_id] = Pin(
            key=key,
            above=text[:start],
            head=head,
            snippets=tuple(s for s in packed.snippets if s.kind not in ("prefix", "suffix")),
            window_line=window.start_line,
            path=window.path,
            reranked=packed.reranked,
            suffix_lines=-1 if suffix is None else suffix.end_line - line,
            suffix_to_end=(suffix is not None and suffix.end_line >= last_line)
            or not text[cursor:].strip(),
        )
        while len(self._pins) > self.max_buffers:
            self._pins.popitem(last=False)

    def forget(self, buffer_id: str) -> None:
        self._pins.pop(buffer_id, None)

    def clear(self) -> None:
        self._pins.clear()

    def __contains__(self, buffer_id: object) -> bool:
        return buffer_id in self._pins

    def stats(self) -> dict[str, int]:
        return {"buffers": len(self._pins), "reused": self.reused, "packed": self.packed}
