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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

CountTokens = Callable[[str], int]

# Lines that survive as a signature summary (Python-like and C-like declarations).
SIGNATURE = re.compile(
    r"^\s*(@|(async\s+)?def\s|class\s|(export\s+)?(async\s+)?function\s|"
    r"(pub(\(\w+\))?\s+)?(fn|struct|enum|trait|impl|type|interface)\s|func\s)"
)


def signature_summary(text: str) -> str:
    """The declaration lines of `text` (decorators, def/class/function headers)."""
    lines = [line for line in text.splitlines() if SIGNATURE.match(line)]
    return "\n".join(lines) + ("\n" if lines else "")


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
) -> Fitted:
    """Step the least useful units down until the total fits `budget` (or nothing can shrink)."""
    fitted = Fitted(units=units)
    sizes = {id(u): count_tokens(u.text) for u in units}
    collapsed_sizes: dict[str, int] = {}

    def total() -> int:
        live = sum(sizes[id(u)] for u in units if u.group not in fitted.collapsed)
        return live + sum(collapsed_sizes.values())

    current = total()
    while current > budget:
        shrinkable = [u for u in units if not u.last and u.group not in fitted.collapsed]
        if not shrinkable:
            break
        victim = min(shrinkable, key=lambda u: (u.score, -sizes[id(u)], u.key))
        victim.level += 1
        sizes[id(victim)] = count_tokens(victim.text)
        fitted.steps += 1
        group = victim.group
        if group is not None and group_summary is not None and total() > budget:
            members = [u for u in units if u.group == group]
            # Every member is at most a summary: one summary line for the whole group is cheaper.
            if all(u.level >= len(u.levels) - 2 for u in members):
                summary = group_summary(group, members)
                size = count_tokens(summary)
                if size < sum(sizes[id(u)] for u in members):
                    fitted.collapsed[group] = summary
                    collapsed_sizes[group] = size
        current = total()
    fitted.tokens = current
    return fitted
