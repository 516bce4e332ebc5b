"""Similar code anywhere in the workspace: the windows of other files whose identifiers overlap
most with the lines above the cursor, shown with the lines that followed them (RepoCoder /
CrossCodeEval-style retrieval: what came after similar code elsewhere is what is likely next).

Bounded for large workspaces: files are first ranked by the identifiers their definitions use
(the index's outlines, no file read), and only the best SCANNED_FILES are read and windowed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from memosight_lsp.workspace import LanguageSpec, WorkspaceIndex

from .lexical import identifiers, jaccard, windows
from .render import split_lines

QUERY_LINES = 10  # lines above the cursor the windows are compared with
MATCH_LINES = 10  # lines of a compared window
FOLLOW_LINES = 10  # lines after a matched window that are shown with it
MIN_SCORE = 0.1
SCANNED_FILES = 12  # files whose windows are compared, the best by their outline's words


@dataclass(frozen=True, slots=True)
class SimilarWindow:
    path: str
    start_line: int  # 0-based, inclusive
    end_line: int  # inclusive: the matched window and the lines that followed it
    score: float  # Jaccard similarity of the matched window's identifiers with the query's
    text: str


def query_words(lines: list[str], line: int, column: int, spec: LanguageSpec) -> set[str]:
    """Identifiers of the lines right above the cursor (and the cursor line's start)."""
    low = max(0, line - QUERY_LINES)
    text = "\n".join(lines[low:line]) + "\n" + lines[line][:column]
    return set(identifiers(text)) - spec.keywords


def similar_windows(
    index: WorkspaceIndex,
    current: str,
    spec: LanguageSpec,
    query: set[str],
    top: int,
) -> list[SimilarWindow]:
    """The `top` windows of the workspace's other files of the cursor's language most like the
    query, best first, never two overlapping in one file."""
    if top <= 0 or len(query) < 2:
        return []
    scored: list[tuple[float, str, int, int]] = []  # (score, path, -start, end): a min-heap
    texts: dict[str, list[str]] = {}
    for rel in _likely_files(index, current, spec, query):
        text = index.text(rel)
        if text is None:
            continue
        texts[rel] = split_lines(text)
        for window in windows(text, MATCH_LINES, spec.keywords):
            score = jaccard(query, window.words)
            if score < MIN_SCORE:
                continue
            item = (score, rel, -window.start, window.end)
            if len(scored) < top * 4:
                heapq.heappush(scored, item)
            elif item > scored[0]:
                heapq.heapreplace(scored, item)
    out: list[SimilarWindow] = []
    for score, rel, neg_start, end in sorted(scored, reverse=True):
        start = -neg_start
        if len(out) >= top:
            break
        if any(o.path == rel and o.start_line <= end and start <= o.end_line for o in out):
            continue
        lines = texts[rel]
        last = min(len(lines) - 1, end + FOLLOW_LINES)
        body = "".join(f"{x}\n" for x in lines[start : last + 1])
        out.append(SimilarWindow(rel, start, last, round(score, 4), body))
    return out


def _likely_files(
    index: WorkspaceIndex, current: str, spec: LanguageSpec, query: set[str]
) -> list[str]:
    """The SCANNED_FILES files of the language whose outlines share most words with the query."""
    ranked: list[tuple[int, str]] = []
    for rel in index.files():
        if rel == current:
            continue
        symbols = index.symbols(rel)
        if symbols is None or symbols.language != spec.name:
            continue
        shared = len(query & symbols.words())
        if shared:
            ranked.append((-shared, rel))
    return [rel for _, rel in heapq.nsmallest(SCANNED_FILES, ranked)]
