"""Pack the ranked code into the token budget and lay the prompt out.

Budget policy (B = budget_tokens, all counted with the caller's `count_tokens`):
- The suffix (code after the cursor) gets up to B/8 with a workspace index, B/4 without, and at
  most `max_suffix_tokens` when the caller bounds it (a PSM prompt prefills it at every keystroke).
- The current file's prefix (lines right above the cursor) gets at least 1/4 of B with an index,
  everything left over without one. Lines nearest the cursor are kept first. Without an index,
  a file longer than that keeps its nearest lines in half of the room and the code above them
  compressed into the rest (far_prefix.py: top-level blocks -> signatures -> dropped).
- When that window does not reach the top of the enclosing function/class, their heads (header +
  docstring) are kept above it, so a long function keeps its head and the lines near the cursor.
- Ranked snippets share the rest (chosen by select.py), coverage first: every candidate that
  fits gets its header joined onto one line (in score order), then types get their
  constructor's header, then stubs get their docstring (types: their members' headers), then
  the best ones their full text while room remains (one full snippet may take at most half of
  that share). Unused room flows back to the current file's prefix.
- The final prompt is counted whole and trimmed (lowest-scored snippet first, then the
  compressed far part, then the farthest prefix lines, then the suffix's last lines) until it
  fits: the budget is never exceeded.

Layout (prefix): cross-file snippets grouped per file under a path marker comment, files in path
order with open/recently edited files last (the chunks least likely to change come first, so an
engine's KV prefix cache survives keystrokes), snippets in line order; then the current file's
marker, its own snippets and enclosing heads in line order, and the lines up to the cursor.
"""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from memosight_lsp.workspace import LanguageSpec, WorkspaceIndex, language_for

from .far_prefix import split_prefix, summarize_above
from .lexical import identifiers
from .rank import NEAR_LINES_ABOVE, NEAR_LINES_BELOW, Candidate, Ranker
from .render import join_lines, render_head
from .select import Piece, Selector, model_order, overlaps, path_marker
from .similar import query_words, similar_windows
from .tokens import TokenCounter, counter_for, grow_upward
from .types import DEFAULT_PACKING, PackedContext, Packing, Rerank, Snippet

SUFFIX_SHARE_INDEXED = 1 / 8
SUFFIX_SHARE_PLAIN = 1 / 4
MIN_PREFIX_SHARE = 1 / 4
HEAD_SHARE = 1 / 8
# With Packing.cross_share, the current file keeps this much before other files get any: at
# small budgets other files' code leaves too little of the current file and costs exact match;
# from MIN_OWN_TOKENS / (1 - share) tokens on the share is what it says. A file shorter than
# this leaves the rest unused: giving it to other files did not pay (figures: docs/context.md).
MIN_OWN_TOKENS = 512
SIMILAR_RANK = 10.0  # added to a similar window's score: it outranks every definition
GATE_LINES = 8  # how far above the cursor Packing.gate looks for the nearest non-blank line


@dataclass(slots=True)
class _Layout:
    marker: str
    current: str
    line: int
    column: int
    lines: list[str]
    spec: LanguageSpec | None
    volatile: set[str] = field(default_factory=set)
    cross: list[Piece] = field(default_factory=list)  # other files' snippets
    local: list[Piece] = field(default_factory=list)  # same-file snippets and enclosing heads
    window_start: int = 0  # first line of the prefix window
    far_text: str = ""  # the lines above the window, compressed (far_prefix), without an index
    prefix_text: str = ""
    suffix_text: str = ""
    suffix_end: int = 0
    reranked: bool = False

    def cross_by_file(self) -> list[tuple[str, list[Piece]]]:
        """Other files' snippets in prompt order: files by path (open or recently edited ones
        last, nearest the cursor), each file's snippets in line order."""
        by_file: dict[str, list[Piece]] = {}
        for piece in self.cross:
            by_file.setdefault(piece.path, []).append(piece)
        return [
            (path, sorted(by_file[path], key=lambda p: p.start_line))
            for path in sorted(by_file, key=lambda p: (p in self.volatile, p))
        ]

    def cross_files(self) -> tuple[tuple[str, str], ...]:
        """(path, its snippets' text) per other file, in prompt order, without path markers."""
        return tuple((path, joined(pieces)) for path, pieces in self.cross_by_file())

    def cross_text(self) -> str:
        """The other files' part of the prefix: each file's path marker and its snippets."""
        parts: list[str] = []
        for path, pieces in self.cross_by_file():
            assert self.spec is not None
            parts.append(path_marker(self.spec, path))
            parts.append(joined(pieces))
        return "".join(parts)

    def prefix(self) -> str:
        parts: list[str] = [self.cross_text()]
        parts.append(self.marker)
        parts.extend(p.text for p in sorted(self.local, key=lambda p: p.start_line))
        parts.append(self.far_text)
        parts.append(self.prefix_text)
        return "".join(parts)

    def snippets(self, counter: TokenCounter) -> list[Snippet]:
        ordered = [piece for _, pieces in self.cross_by_file() for piece in pieces]
        ordered.extend(sorted(self.local, key=lambda p: p.start_line))
        out = [_snippet(p) for p in ordered]
        if self.far_text:
            out.append(
                Snippet(
                    path=self.current,
                    start_line=0,
                    end_line=max(0, self.window_start - 1),
                    symbol=None,
                    kind="far",
                    tokens=counter(self.far_text),
                    score=1.0,
                    text=self.far_text,
                )
            )
        if self.prefix_text:
            out.append(
                Snippet(
                    path=self.current,
                    start_line=self.window_start,
                    end_line=self.line,
                    symbol=None,
                    kind="prefix",
                    tokens=counter(self.prefix_text),
                    score=1.0,
                    text=self.prefix_text,
                )
            )
        if self.suffix_text:
            out.append(
                Snippet(
                    path=self.current,
                    start_line=self.line,
                    end_line=self.suffix_end,
                    symbol=None,
                    kind="suffix",
                    tokens=counter(self.suffix_text),
                    score=1.0,
                    text=self.suffix_text,
                )
            )
        return out


def _snippet(p: Piece) -> Snippet:
    score = p.score / (1.0 + p.score) if p.kind not in ("enclosing",) else 1.0
    return Snippet(
        path=p.path,
        start_line=p.start_line,
        end_line=p.end_line,
        symbol=p.symbol,
        kind=p.kind,
        tokens=p.tokens,
        score=round(score, 4),
        text=p.text,
    )


# -- the current file's own lines --------------------------------------------------------------
def _prefix_window(
    lines: list[str], line: int, column: int, budget: int, counter: TokenCounter, floor: int = 0
) -> tuple[int, str, int]:
    """(first line, text, tokens) of the longest run of lines ending at the cursor within budget."""
    cursor = lines[line][:column]
    used = counter.piece(cursor)
    if used > budget:
        return line, "", 0
    start, used = grow_upward(lines, line, used, budget, counter, floor)
    return start, join_lines(lines[start:line]) + cursor, used


def suffix_window(
    lines: list[str], line: int, column: int, budget: int, counter: TokenCounter
) -> tuple[int, str, int]:
    """(last line, text, tokens) of the longest run of lines from the cursor within budget."""
    rest = lines[line][column:]
    last = len(lines) - 1
    first = rest + ("\n" if line < last else "")
    used = counter.piece(first)
    if used > budget:
        return line, "", 0
    end = line
    parts = [first]
    for i in range(line + 1, last + 1):
        piece = lines[i] + ("\n" if i < last else "")
        cost = counter.piece(piece)
        if used + cost > budget:
            break
        used += cost
        parts.append(piece)
        end = i
    return end, "".join(parts), used


def current_name(index: WorkspaceIndex | None, path: str | None) -> str:
    """How the context names the current file (its marker, its snippets' path): relative to the
    index root, its base name outside the root or without an index, "" without a path."""
    if index is not None and path is not None:
        rel = index.relpath(path)
        return posixpath.basename(rel) if rel.startswith("/") else rel
    return posixpath.basename(path) if path else ""


# -- entry point --------------------------------------------------------------------------------
def build_context(
    *,
    text: str,
    path: str | None,
    line: int,
    column: int,
    language_id: str | None,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    index: WorkspaceIndex | None = None,
    open_buffers: Mapping[str, str] = {},  # read-only; the agreed signature
    recent_edits: Sequence[tuple[str, int]] = (),
    rerank: Rerank | None = None,
    max_suffix_tokens: int | None = None,
    packing: Packing = DEFAULT_PACKING,
) -> PackedContext:
    """The prompt halves for a completion at (line, column) — 0-based line, str-index column.

    Never exceeds `budget_tokens` as counted by `count_tokens`; a budget <= 0 gives an empty
    context. Without an index (or for a language without a grammar) the context is the current
    file alone. `rerank` reorders the structural ranker's best candidates when they overflow.
    A `TokenCounter` given as `count_tokens` keeps its memo of counted lines from call to call.
    `max_suffix_tokens` bounds the code after the cursor below its share of the budget.
    `packing` changes how the budget is shared with an index (types.Packing).
    """
    if budget_tokens <= 0:
        return PackedContext.empty()
    counter = counter_for(count_tokens)
    lines = text.split("\n")
    line = min(max(0, line), len(lines) - 1)
    column = min(max(0, column), len(lines[line]))
    spec = language_for(path, language_id)
    current = current_name(index, path)
    layout = _Layout(
        marker=path_marker(spec, current),
        current=current,
        line=line,
        column=column,
        lines=lines,
        spec=spec,
        volatile={index.relpath(p) for p in open_buffers} if index is not None else set(),
    )
    if index is not None:
        layout.volatile |= {index.relpath(p) for p, _ in recent_edits}
    symbols = None
    if index is not None and spec is not None:
        symbols = index.symbols_for_text(path, text, language_id)
    budget = budget_tokens
    max_suffix = budget if max_suffix_tokens is None else max(0, max_suffix_tokens)
    if symbols is None or spec is None or index is None:
        _plain(layout, budget, counter, max_suffix)
    else:
        ranker = Ranker(
            index=index,
            rel=current,
            spec=spec,
            symbols=symbols,
            lines=lines,
            line=line,
            column=column,
            open_buffers=open_buffers,
            recent_edits=recent_edits,
        )
        if packing.cross_share is not None:
            _shared(layout, budget, counter, ranker, spec, rerank, max_suffix, packing)
        else:
            _ranked(layout, budget, counter, ranker, spec, rerank, max_suffix, packing)
    prefix, tokens = _fit(layout, budget, counter)
    return PackedContext(
        prefix=prefix,
        suffix=layout.suffix_text,
        snippets=layout.snippets(counter),
        prompt_tokens=tokens,
        reranked=layout.reranked,
        cross_chars=len(layout.cross_text()),
        cross_files=layout.cross_files(),
        current_path=current,
        marker_chars=len(layout.marker),
    )


def _plain(
    layout: _Layout,
    budget: int,
    counter: TokenCounter,
    max_suffix: int,
    packing: Packing = DEFAULT_PACKING,
) -> None:
    lines, line, column = layout.lines, layout.line, layout.column
    share = SUFFIX_SHARE_PLAIN if packing.suffix_share is None else packing.suffix_share
    layout.suffix_end, layout.suffix_text, suffix_used = suffix_window(
        lines, line, column, min(int(budget * share), max_suffix), counter
    )
    room = budget - suffix_used - counter.piece(layout.marker)
    start, text, _ = _prefix_window(lines, line, column, room, counter)
    if start > 0 and packing.far_prefix:
        # The file does not fit: the lines nearest the cursor take part of the room and the code
        # above them is compressed into the rest instead of cut off.
        prefix_lines = [*lines[:line], lines[line][:column]]
        start, layout.far_text, text = split_prefix(prefix_lines, room, counter)
    layout.window_start, layout.prefix_text = start, text


def _shared(
    layout: _Layout,
    budget: int,
    counter: TokenCounter,
    ranker: Ranker,
    spec: LanguageSpec,
    rerank: Rerank | None,
    max_suffix: int,
    packing: Packing,
) -> None:
    """Packing.cross_share: other files' snippets in at most that share of the budget, and
    never in the current file's first MIN_OWN_TOKENS, then the current file in what they left,
    packed as without an index (_plain)."""
    assert packing.cross_share is not None
    room = min(int(budget * packing.cross_share), budget - MIN_OWN_TOKENS)
    similar = similar_candidates(ranker, packing.similar) if room > 0 else []
    if room > 0 and packing.gate and not cross_pays(ranker, similar, packing):
        room = 0  # the current file alone: the same prompt as without an index
    if room > 0:
        candidates = [c for c in ranker.rank() if c.path != layout.current]
        if packing.foreign_only:
            candidates = foreign_candidates(candidates, ranker)
        selector = Selector(ranker, counter, spec, layout.current)
        if rerank is not None:
            candidates = _model_ordered(layout, candidates, rerank, selector, room)
        if packing.similar > 0:
            candidates = similar if packing.similar_only else similar + candidates
        layout.cross, _ = selector.select(candidates, room, (0, -1))
    if not packing.current_marker and not layout.cross:
        layout.marker = ""
    _plain(layout, budget - counter(layout.cross_text()), counter, max_suffix, packing)


def _ranked(
    layout: _Layout,
    budget: int,
    counter: TokenCounter,
    ranker: Ranker,
    spec: LanguageSpec,
    rerank: Rerank | None,
    max_suffix: int,
    packing: Packing,
) -> None:
    lines, line, column = layout.lines, layout.line, layout.column
    marker = counter.piece(layout.marker)
    # The floor of lines above the cursor comes first, then the suffix's share of what is left.
    floor_used = 0
    if packing.prefix_floor_lines > 0:
        top = max(0, line - packing.prefix_floor_lines)
        _, _, floor_used = _prefix_window(lines, line, column, budget - marker, counter, top)
    share = SUFFIX_SHARE_INDEXED if packing.suffix_share is None else packing.suffix_share
    suffix_room = min(int(budget * share), max_suffix, budget - marker - floor_used)
    layout.suffix_end, layout.suffix_text, suffix_used = suffix_window(
        lines, line, column, max(0, suffix_room), counter
    )
    start, _, window_used = _prefix_window(
        lines, line, column, max(floor_used, int(budget * MIN_PREFIX_SHARE)), counter
    )
    # Heads of the enclosing definitions the window does not reach.
    heads: list[Piece] = []
    head_room = int(budget * HEAD_SHARE)
    python = spec.name == "python"
    for d in ranker.symbols.enclosing(line):
        if d.start_line >= start or d.start_line == line:
            continue
        text = render_head(lines, d, python)
        tokens = counter.piece(text)
        if tokens > head_room:
            text = join_lines(lines[d.start_line : d.sig_end_line + 1])
            tokens = counter.piece(text)
        if tokens > head_room:
            continue
        head_room -= tokens
        end = d.start_line + text.count("\n") - 1
        heads.append(
            Piece(layout.current, d.start_line, end, d.qualname, "enclosing", text, tokens, 1.0)
        )
    heads_used = sum(h.tokens for h in heads)
    room = budget - suffix_used - marker - window_used - heads_used
    selector = Selector(ranker, counter, spec, layout.current)
    chosen: list[Piece] = []
    if room > 0:
        candidates = ranker.rank()
        if packing.foreign_only:
            candidates = foreign_candidates(candidates, ranker)
        if rerank is not None:
            candidates = _model_ordered(layout, candidates, rerank, selector, room)
        chosen, used = selector.select(candidates, room, (start, layout.suffix_end))
        room -= used
    layout.cross = [p for p in chosen if p.path != layout.current]
    local = [p for p in chosen if p.path == layout.current]
    # Give what is left back to the window; drop heads and snippets it comes to contain.
    for _ in range(4):
        start, prefix_text, new_used = _prefix_window(
            lines, line, column, window_used + max(0, room), counter
        )
        room -= new_used - window_used
        window_used = new_used
        covered = [h for h in heads if h.start_line >= start] + [
            p for p in local if overlaps(p.start_line, p.end_line, start, layout.suffix_end)
        ]
        if not covered:
            break
        for p in covered:
            room += p.tokens
            if p in heads:
                heads.remove(p)
            else:
                local.remove(p)
    layout.window_start, layout.prefix_text = start, prefix_text
    layout.local = heads + local


def _model_ordered(
    layout: _Layout, candidates: list[Candidate], rerank: Rerank, selector: Selector, room: int
) -> list[Candidate]:
    """The candidates in the second-stage ranker's order where it is asked (select.model_order),
    judged on the lines up to the cursor."""
    lines, line = layout.lines, layout.line
    target = join_lines(lines[max(0, line - rerank.target_lines) : line])
    target += lines[line][: layout.column]
    reordered = model_order(candidates, rerank, selector, room, target)
    layout.reranked = reordered is not None
    return reordered or candidates


@dataclass(frozen=True)
class GateRule:
    """What opens Packing.gate (cross_pays)."""

    names: bool  # a name another file defines, on the cursor's line or the nearest line above
    similarity: float  # a window of another file at least this alike (similar.py's score)


# The gate's rule per language (LanguageSpec.name) where Packing names none, from bench quality
# on held-out projects (docs/context.md: chosen on runs 17-20, confirmed by 21-22). In Python
# a name near the cursor that another file defines is rare and points at code worth reading.
# In the brace languages it is on nearly every line (types, a Go package's or a Java package's
# names), and letting those files in cost exact matches against the file alone: there only a
# near copy of the code above the cursor opens the gate.
GATE_RULES = {"python": GateRule(names=True, similarity=0.5)}
OTHER_GATE_RULE = GateRule(names=False, similarity=0.8)


def gate_rule(packing: Packing, language: str) -> GateRule:
    """The language's rule with what the packing sets itself."""
    rule = GATE_RULES.get(language, OTHER_GATE_RULE)
    return GateRule(
        names=rule.names if packing.gate_names is None else packing.gate_names,
        similarity=rule.similarity if packing.gate_similarity is None else packing.gate_similarity,
    )


def cross_pays(ranker: Ranker, similar: list[Candidate], packing: Packing) -> bool:
    """Packing.gate: whether other files' code is worth its tokens at this cursor. On held-out
    projects it cost the lines that only continue the current file (docs/context.md): it pays
    where code like this exists elsewhere (a window at least the rule's `similarity` alike)
    or, with the rule's `names`, where the code at the cursor names what another file defines
    (the cursor's line and the nearest non-blank line above it use a name this file neither
    defines nor binds locally)."""
    rule = gate_rule(packing, ranker.spec.name)
    if any(c.score - SIMILAR_RANK >= rule.similarity for c in similar):
        return True
    if not rule.names:
        return False
    lines, line = ranker.lines, ranker.line
    above = next(
        (row for row in reversed(lines[max(0, line - GATE_LINES) : line]) if row.strip()), ""
    )
    words = set(identifiers(lines[line] + "\n" + above)) - ranker.spec.keywords
    words -= {d.name for d in ranker.symbols.definitions}
    words -= ranker.local_names(ranker.innermost())
    return any(rel != ranker.rel for w in words for rel in ranker.index.files_defining(w))


def similar_candidates(ranker: Ranker, top: int) -> list[Candidate]:
    """Packing.similar: the windows of other files most like the lines above the cursor, as
    candidates that outrank every definition (trimming drops them last)."""
    query = query_words(ranker.lines, ranker.line, ranker.column, ranker.spec)
    found = similar_windows(ranker.index, ranker.rel, ranker.spec, query, top)
    return [
        Candidate(
            path=w.path,
            definition=None,
            def_index=-1,
            start_line=w.start_line,
            end_line=w.end_line,
            score=SIMILAR_RANK + w.score,
            symbols=None,
            text=w.text,
        )
        for w in found
    ]


def foreign_candidates(candidates: list[Candidate], ranker: Ranker) -> list[Candidate]:
    """Packing.foreign_only: the current file's own definitions (the selector leaves out those
    in view) and other files' definitions of names that the lines near the cursor use or the
    file imports, and that the file does not define itself; no similar windows."""
    lines, line = ranker.lines, ranker.line
    near = "\n".join(lines[max(0, line - NEAR_LINES_ABOVE) : line + NEAR_LINES_BELOW + 1])
    wanted = set(identifiers(near))
    wanted.update(imp.alias for imp in ranker.symbols.imports if imp.alias)
    wanted -= {d.name for d in ranker.symbols.definitions if d.parent < 0}
    return [
        c
        for c in candidates
        if c.definition is not None and (c.path == ranker.rel or c.definition.name in wanted)
    ]


def joined(pieces: list[Piece]) -> str:
    """One file's snippets in line order, a blank line between two that are not adjacent in
    the file: glued together, a definition's head, a constant from inside a block and a window
    that starts mid-function read as one piece of code, which no real file is (exact match was
    the same with and without it, docs/context.md, run 15)."""
    text = pieces[0].text if pieces else ""
    for before, piece in itertools.pairwise(pieces):
        apart = piece.start_line > before.end_line + 1
        if apart and piece.text.strip("\n") and not before.text.endswith("\n\n"):
            text += "\n" if before.text.endswith("\n") else "\n\n"
        text += piece.text
    return text


def _fit(layout: _Layout, budget: int, counter: TokenCounter) -> tuple[str, int]:
    """Trim until the exact count of the assembled prompt fits (piece counts only estimate it).
    Returns the prefix and the prompt's token count.

    Every step of `_trim` removes something for good (a snippet, tokens of the far part, a line,
    the marker), so the loop ends; the steps it may take are bounded by what there is to remove,
    and past that bound the prompt is cut to the text nearest the cursor that fits (`_last_cut`),
    whatever the layout: packing always ends and always fits."""
    steps = (
        len(layout.cross)
        + len(layout.local)
        + (layout.line - layout.window_start)
        + (layout.suffix_end - layout.line)
        + counter(layout.far_text)
        + 8
    )
    for _ in range(steps):
        prefix = layout.prefix()
        total = counter(prefix) + counter(layout.suffix_text)
        over = total - budget
        if over <= 0:
            return prefix, total
        if not _trim(layout, over, counter):
            break
    return _last_cut(layout, budget, counter)


def _trim(layout: _Layout, over: int, counter: TokenCounter) -> bool:
    """Remove one thing from the layout, the least useful first; False when only the cursor
    line's own text is left (or nothing)."""
    removable = [p for p in layout.cross + layout.local if p.kind != "enclosing"]
    if removable:
        worst = min(removable, key=lambda p: (p.score, p.path, -p.start_line))
        (layout.cross if worst in layout.cross else layout.local).remove(worst)
        return True
    if layout.far_text:
        # A shorter summary, or none: the summary is fitted piece by piece, so asking for fewer
        # tokens can give back the same text; then the far part goes.
        had = counter(layout.far_text)
        shorter = summarize_above(
            layout.lines, layout.window_start, layout.prefix_text, had - over, counter
        )
        layout.far_text = shorter if counter(shorter) < had else ""
        return True
    if layout.window_start < layout.line:
        drop = max(1, min(layout.line - layout.window_start, over // 8))
        layout.window_start += drop
        layout.prefix_text = (
            join_lines(layout.lines[layout.window_start : layout.line])
            + layout.lines[layout.line][: layout.column]
        )
        return True
    if layout.local:
        layout.local.pop(0)
        return True
    if layout.suffix_end > layout.line:
        cut = layout.suffix_text.rstrip("\n").rfind("\n")
        layout.suffix_text = layout.suffix_text[: cut + 1] if cut >= 0 else ""
        layout.suffix_end -= 1
        return True
    for attribute in ("suffix_text", "marker"):
        if getattr(layout, attribute):
            setattr(layout, attribute, "")
            return True
    if layout.cross:
        layout.cross.clear()
        return True
    return False


def _last_cut(layout: _Layout, budget: int, counter: TokenCounter) -> tuple[str, int]:
    """The end of the cursor line's text (and of nothing else) that fits: the longest tail of
    the prefix within `budget`, found by bisection; the rest of the layout is emptied."""
    layout.cross.clear()
    layout.local.clear()
    layout.far_text = layout.suffix_text = layout.marker = ""
    layout.suffix_end = layout.line
    text = layout.prefix_text
    lo, hi = 0, len(text)
    while lo < hi:  # bisection: ends after log2(len(text)) steps
        mid = (lo + hi) // 2
        if counter(text[mid:]) <= budget:
            hi = mid
        else:
            lo = mid + 1
    layout.prefix_text = text[lo:]
    layout.window_start = layout.line - layout.prefix_text.count("\n")
    return layout.prefix_text, counter(layout.prefix_text)
