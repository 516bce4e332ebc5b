"""Token counting through the caller's `count_tokens`, memoised per piece (line, snippet).

The same lines are counted again on every keystroke; remembering them keeps packing in the
low milliseconds even with a real tokenizer. The memo belongs to a TokenCounter: a caller that
packs again and again (the completion engine) keeps one and passes it as `count_tokens`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

_MAX_ENTRIES = 50_000


class TokenCounter:
    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self.count_tokens = count_tokens
        # Count of a piece (a line, a snippet), memoised: least recently used pieces go first.
        self.piece = functools.lru_cache(maxsize=_MAX_ENTRIES)(self.__call__)

    def __call__(self, text: str) -> int:
        """Exact count of a whole text (not memoised: prompts change every call)."""
        return self.count_tokens(text) if text else 0


def grow_upward(
    lines: list[str], end: int, used: int, budget: float, counter: TokenCounter, floor: int = 0
) -> tuple[int, int]:
    """Take whole lines above line `end` (each with its newline) while the total stays within
    `budget`, starting from `used` tokens and never above `floor`: (first line, total)."""
    start = end
    while start > floor:
        cost = counter.piece(lines[start - 1] + "\n")
        if used + cost > budget:
            break
        used += cost
        start -= 1
    return start, used


def counter_for(count_tokens: Callable[[str], int]) -> TokenCounter:
    """The caller's own counter (its memo lives as long as the caller keeps it), else a counter
    whose memo serves this one packing."""
    if isinstance(count_tokens, TokenCounter):
        return count_tokens
    return TokenCounter(count_tokens)
