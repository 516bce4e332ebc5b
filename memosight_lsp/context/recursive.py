"""Recursive compression for contexts far over budget: full -> signatures -> dropped, by level.

Works on any hierarchy of units (chunks inside files inside folders): each unit carries its
renderings from most to least detailed (the last is usually "", dropped) and a score (higher:
more useful; e.g. the structural rank, or the model-scored gain passed in as a callable). While
the total is over budget, the least useful unit that can still shrink steps down one level.
A group (a file, a folder) that has every member at its last-but-one level or below collapses
into its own summary rendering while the total is still over budget, so a whole folder can end
as one line. No torch, no tokenizer: token counting and summarising are callables.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

CountTokens = Callable[[str], int]

# Lines that survive as a signature summary (Python-like and C-like declarations).
SIGNATURE = re.compile(
    r"^\s*(@|(async\s+)?def\s|class\s|(export\s+)?(async\s+)?function\s|"
    r"(pub(\(\w+\))?\s+)?(fn|struct|enum|trait|impl|type|interface)\s|func\s)"
)

# A header's continuation lines kept at most (an unbalanced bracket must not swallow a block).
MAX_HEADER_LINES = 12


def signature_summary(text: str) -> str:
    """The declaration lines of `text` (decorators, def/class/function headers); a header whose
    brackets span several lines (one argument per line) is kept whole. Lines inside triple-quoted
    strings (docstrings quoting code) are not declarations."""
    lines = text.splitlines()
    kept: list[str] = []
    in_string = False
    i = 0
    while i < len(lines):
        quotes = lines[i].count('"""') + lines[i].count("'''")
        if in_string or not SIGNATURE.match(lines[i]):
            in_string ^= quotes % 2 == 1
            i += 1
            continue
        depth = _bracket_depth(lines[i])
        header_start = len(kept)
        kept.append(lines[i])
        i += 1
        while depth > 0 and i < len(lines) and len(kept) - header_start < MAX_HEADER_LINES:
            depth += _bracket_depth(lines[i])
            kept.append(lines[i])
            i += 1
    return "\n".join(kept) + ("\n" if kept else "")


def _bracket_depth(line: str) -> int:
    return sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")


@dataclass(kw_only=True)
class Unit:
    key: str
    levels: Sequence[str]  # renderings, most detailed first; "" means dropped
    score: float = 0.0
    group: str | None = None  # the file/folder it belongs to (collapsible together)
    level: int = 0

    @property
    def text(self) -> str:
        return self.levels[self.level]

    @property
    def last(self) -> bool:
        return self.level >= len(self.levels) - 1


@dataclass(kw_only=True)
class Fitted:
    units: list[Unit]
    collapsed: dict[str, str] = field(default_factory=dict)  # group -> its summary text
    tokens: int = 0
    steps: int = 0

    def text(self) -> str:
        parts = [u.text for u in self.units if u.group not in self.collapsed and u.text]
        return "".join(parts + list(self.collapsed.values()))


def units_for(
    chunks: Sequence[tuple[str, str]],
    scores: Sequence[float],
    summarize: Callable[[str], str] = signature_summary,
    group_of: Callable[[str], str | None] = lambda key: None,
) -> list[Unit]:
    """Units (full, summary, dropped) from (key, text) chunks and their scores."""
    out = []
    for (key, text), score in zip(chunks, scores, strict=True):
        summary = summarize(text)
        levels = [text, summary, ""] if summary and summary != text else [text, ""]
        out.append(Unit(key=key, levels=levels, score=score, group=group_of(key)))
    return out


def fit(
    units: list[Unit],
    budget: int,
    count_tokens: CountTokens,
    *,
    group_summary: Callable[[str, list[Unit]], str] | None = None,
    refill: bool = False,
) -> Fitted:
    """Step the least useful units down until the total fits `budget` (or nothing can shrink).
    With `refill`, room left over once it fits goes back to the most useful units (one level
    up at a time), since a big unit's last step can free far more than was needed."""
    fitted = Fitted(units=units)
    sizes = {id(u): count_tokens(u.text) for u in units}
    current = sum(sizes.values())
    # The next victim is the least useful unit, the biggest among equals: a heap of
    # (score, -size, key) entries; an entry whose unit has moved on since it was pushed is stale.
    heap = [(u.score, -sizes[id(u)], u.key, u.level, i) for i, u in enumerate(units) if not u.last]
    heapq.heapify(heap)
    while current > budget and heap:
        _, _, _, level, i = heapq.heappop(heap)
        victim = units[i]
        if level != victim.level or victim.group in fitted.collapsed:
            continue
        victim.level += 1
        old, sizes[id(victim)] = sizes[id(victim)], count_tokens(victim.text)
        current += sizes[id(victim)] - old
        fitted.steps += 1
        if not victim.last:
            heapq.heappush(heap, (victim.score, -sizes[id(victim)], victim.key, victim.level, i))
        group = victim.group
        if group is not None and group_summary is not None and current > budget:
            members = [u for u in units if u.group == group]
            # Every member is at most a summary: one summary line for the whole group is cheaper.
            if all(u.level >= len(u.levels) - 2 for u in members):
                summary = group_summary(group, members)
                size = count_tokens(summary)
                live = sum(sizes[id(u)] for u in members)
                if size < live:
                    fitted.collapsed[group] = summary
                    current += size - live
    if refill and current <= budget:
        for unit in sorted(units, key=lambda u: (-u.score, u.key)):
            while unit.level > 0 and unit.group not in fitted.collapsed:
                size = count_tokens(unit.levels[unit.level - 1])
                if current + size - sizes[id(unit)] > budget:
                    break
                current += size - sizes[id(unit)]
                sizes[id(unit)] = size
                unit.level -= 1
    fitted.tokens = current
    return fitted
