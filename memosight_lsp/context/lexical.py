"""Lexical similarity, the fallback signal: Jaccard over identifier sets of sliding windows, as
Copilot compares the cursor's neighbourhood with windows of neighbouring tabs."""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
WINDOW_LINES = 20
STRIDE = 10
_CACHE_SIZE = 256


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


_windows: OrderedDict[tuple[str, int], tuple[Window, ...]] = OrderedDict()


def windows(key: str, lines: list[str], size: int = WINDOW_LINES) -> tuple[Window, ...]:
    """Sliding windows of a file (memoised by `key`, which should include a content hash)."""
    cache_key = (key, size)
    hit = _windows.get(cache_key)
    if hit is not None:
        _windows.move_to_end(cache_key)
        return hit
    out = []
    n = len(lines)
    for start in range(0, max(1, n - size // 2), STRIDE):
        end = min(n, start + size) - 1
        words = frozenset(_IDENT.findall("\n".join(lines[start : end + 1])))
        if words:
            out.append(Window(start, end, words))
    result = tuple(out)
    _windows[cache_key] = result
    if len(_windows) > _CACHE_SIZE:
        _windows.popitem(last=False)
    return result


def best_windows(
    query: set[str], key: str, lines: list[str], top: int = 2, size: int = WINDOW_LINES
) -> list[tuple[float, Window]]:
    """The `top` most similar non-overlapping windows, best first."""
    scored = sorted(
        ((jaccard(query, w.words), w) for w in windows(key, lines, size)),
        key=lambda item: (-item[0], item[1].start),
    )
    picked: list[tuple[float, Window]] = []
    for score, window in scored:
        if score <= 0 or len(picked) >= top:
            break
        if all(window.end < p.start or window.start > p.end for _, p in picked):
            picked.append((score, window))
    return picked
