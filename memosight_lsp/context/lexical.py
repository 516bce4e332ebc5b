"""Lexical similarity, the fallback signal: Jaccard over identifier sets of sliding windows, as
Copilot compares the cursor's neighbourhood with windows of neighbouring tabs."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WINDOW_LINES = 20
STRIDE = 10


def identifiers(text: str) -> list[str]:
    return _IDENT.findall(text)


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


@dataclass(frozen=True, slots=True)
class Window:
    start: int  # first line, 0-based
    end: int  # last line, inclusive
    words: frozenset[str]


@functools.lru_cache(maxsize=256)  # the same files are compared on every keystroke
def windows(
    text: str, size: int = WINDOW_LINES, ignore: frozenset[str] = frozenset()
) -> tuple[Window, ...]:
    """Sliding windows of a file's text, each with its identifiers but those in `ignore`."""
    lines = text.split("\n")
    out = []
    n = len(lines)
    for start in range(0, max(1, n - size // 2), STRIDE):
        end = min(n, start + size) - 1
        words = frozenset(_IDENT.findall("\n".join(lines[start : end + 1]))) - ignore
        if words:
            out.append(Window(start, end, words))
    return tuple(out)


def best_windows(
    query: set[str], text: str, top: int = 2, size: int = WINDOW_LINES
) -> list[tuple[float, Window]]:
    """The `top` windows of `text` most similar to `query`, not overlapping, best first."""
    scored = sorted(
        ((jaccard(query, w.words), w) for w in windows(text, size)),
        key=lambda item: (-item[0], item[1].start),
    )
    picked: list[tuple[float, Window]] = []
    for score, window in scored:
        if score <= 0 or len(picked) >= top:
            break
        if all(window.end < p.start or window.start > p.end for _, p in picked):
            picked.append((score, window))
    return picked
