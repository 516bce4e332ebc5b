"""Choosing the ranked snippets that fit a share of the budget: coverage first, then depth.

Every candidate that fits gets its header (render.HEADER) in score order; then, in score order
while room remains, types get their constructor, stubs their docstring and members, and the
best ones (at most MAX_FULL_UPGRADES) their whole text. A second-stage ranker (types.Rerank)
may reorder the best candidates first when they overflow the room.
"""

from __future__ import annotations

from dataclasses import dataclass

from memosight_lsp.workspace import Definition, LanguageSpec

from .rank import Candidate, Ranker
from .render import CONSTRUCTOR, DOCUMENTED, HEADER, render_full, render_signature, split_lines
from .tokens import TokenCounter
from .types import Rerank

MAX_FULL_SHARE = 1 / 2
MAX_FULL_UPGRADES = 6
FULL = DOCUMENTED + 1  # a definition's whole text
# No tokenizer packs code denser than this: longer texts cannot fit and are not counted.
MAX_CHARS_PER_TOKEN = 12


@dataclass(slots=True, eq=False)  # identity: membership tests must not compare texts
class Piece:
    """One chunk chosen for the prompt."""

    path: str
    start_line: int
    end_line: int
    symbol: str | None
    kind: str
    text: str
    tokens: int
    score: float
    candidate: Candidate | None = None
    level: int = 0  # render.HEADER, CONSTRUCTOR, DOCUMENTED, or FULL


def path_marker(spec: LanguageSpec | None, rel: str) -> str:
    return spec.path_marker(rel) if spec is not None and rel else ""


class Selector:
    def __init__(
        self, ranker: Ranker, counter: TokenCounter, spec: LanguageSpec, current: str
    ) -> None:
        self.ranker = ranker
        self.counter = counter
        self.spec = spec
        self.current = current
        self.texts: dict[str, list[str] | None] = {}

    def lines_of(self, rel: str) -> list[str] | None:
        if rel not in self.texts:
            if rel == self.current:
                self.texts[rel] = self.ranker.lines
            else:
                text = self.ranker.file_text(rel)
                self.texts[rel] = split_lines(text) if text is not None else None
        return self.texts[rel]

    def render(self, c: Candidate, level: int) -> str | None:
        """A stub at render's levels of detail (HEADER, CONSTRUCTOR, DOCUMENTED), or FULL."""
        if c.definition is None:
            return c.text
        lines = self.lines_of(c.path)
        if lines is None or c.symbols is None or c.end_line >= len(lines):
            return None
        if level >= FULL:
            return render_full(lines, c.definition)
        return render_signature(lines, c.symbols, c.def_index, detail=level)

    def select(
        self, candidates: list[Candidate], budget: int, blocked: tuple[int, int]
    ) -> tuple[list[Piece], int]:
        """Coverage first, then depth: a header for as many candidates as fit (score order), then
        docstrings for them, then the full text of the best. Returns (pieces, tokens used)."""
        chosen: list[Piece] = []
        seen_text: set[str] = set()
        paid_markers: set[str] = set()
        used = 0
        for c in candidates:
            if used >= budget:
                break
            if c.path == self.current and overlaps(c.start_line, c.end_line, *blocked):
                continue  # already visible in the prefix window
            if any(_covers(p, c) for p in chosen):
                continue
            text = self.render(c, HEADER)
            if not text or text in seen_text:
                continue
            tokens = self.counter.piece(text)
            marker = 0
            if c.path != self.current and c.path not in paid_markers:
                marker = self.counter.piece(path_marker(self.spec, c.path))
            if used + tokens + marker > budget:
                continue
            used += tokens + marker
            if marker:
                paid_markers.add(c.path)
            seen_text.add(text)
            kind = "window" if c.definition is None else "signature"
            piece = make_piece(c, kind, text, tokens)
            piece.level = HEADER
            chosen.append(piece)
        by_score = sorted(chosen, key=lambda p: (-p.score, p.path, p.start_line))
        for level in (CONSTRUCTOR, DOCUMENTED):
            used = self._upgrade(by_score, chosen, level, len(by_score), budget, used)
        used = self._upgrade(by_score, chosen, FULL, MAX_FULL_UPGRADES, budget, used)
        for piece in chosen:
            source = piece.candidate
            if (
                piece.kind == "signature"
                and source is not None
                and piece.end_line - piece.start_line < 4  # only short ones can be whole already
                and piece.text == self.render(source, FULL)
            ):
                piece.kind = "full"
        return chosen, used

    def _upgrade(
        self,
        by_score: list[Piece],
        chosen: list[Piece],
        level: int,
        limit: int,
        budget: int,
        used: int,
    ) -> int:
        done = 0
        for piece in by_score:
            c = piece.candidate
            if done >= limit or piece not in chosen:
                continue
            if piece.kind != "signature" or c is None or piece.level >= level:
                continue
            text = self.render(c, level)
            if not text or text == piece.text:
                piece.level = level
                continue
            members = []
            if level == FULL:  # a full class makes its members' own chunks redundant
                members = [
                    p
                    for p in chosen
                    if p is not piece and p.path == piece.path and _inside(p, piece)
                ]
            freed = piece.tokens + sum(p.tokens for p in members)
            # Counting a text that cannot fit costs more than the rest of the packing (cold).
            limit_tokens: float = budget - used + freed
            if level == FULL:
                limit_tokens = min(limit_tokens, budget * MAX_FULL_SHARE)
            if len(text) > limit_tokens * MAX_CHARS_PER_TOKEN:
                continue
            tokens = self.counter.piece(text)
            extra = tokens - freed
            if (level == FULL and tokens > budget * MAX_FULL_SHARE) or used + extra > budget:
                continue
            used += extra
            done += 1
            for member in members:
                chosen.remove(member)
            piece.text, piece.tokens, piece.level = text, tokens, level
            if level == FULL:
                piece.kind = "full"
        return used


def make_piece(c: Candidate, kind: str, text: str, tokens: int) -> Piece:
    d: Definition | None = c.definition
    return Piece(
        path=c.path,
        start_line=c.start_line,
        end_line=c.end_line,
        symbol=d.qualname if d is not None else None,
        kind=kind,
        text=text,
        tokens=tokens,
        score=c.score,
        candidate=c,
    )


def overlaps(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 <= b1 and b0 <= a1


def _covers(piece: Piece, c: Candidate) -> bool:
    """An already chosen chunk that makes the candidate redundant."""
    if piece.path != c.path:
        return False
    if c.definition is None or piece.kind == "window":
        return overlaps(piece.start_line, piece.end_line, c.start_line, c.end_line)
    return (
        piece.kind == "full" and piece.start_line <= c.start_line and c.end_line <= piece.end_line
    )


def _inside(inner: Piece, outer: Piece) -> bool:
    return outer.start_line <= inner.start_line and inner.end_line <= outer.end_line


def model_order(
    candidates: list[Candidate], rerank: Rerank, selector: Selector, room: int, target: str
) -> list[Candidate] | None:
    """The candidates with the first `max_candidates` in the second-stage ranker's order, their
    scores rewritten to match it (trimming drops the lowest score first); None when they fit
    without it (nothing to choose between) or there is no code above the cursor to judge by."""
    head = [c for c in candidates[: rerank.max_candidates] if c.score > 0]
    if len(head) < 2 or not target.strip():
        return None
    texts = [selector.render(c, DOCUMENTED) or "" for c in head]
    if sum(selector.counter.piece(t) for t in texts) < rerank.min_overflow * room:
        return None
    gains = rerank.score(texts, target)
    order = sorted(range(len(head)), key=lambda i: (-gains[i], i))
    top = max(c.score for c in head)
    out: list[Candidate] = []
    for place, i in enumerate(order):
        head[i].score = top * (len(head) - place) / len(head)
        out.append(head[i])
    floor = out[-1].score
    kept = set(map(id, head))
    for c in candidates:
        if id(c) not in kept:
            c.score = min(c.score, floor * 0.5)
            out.append(c)
    return out
