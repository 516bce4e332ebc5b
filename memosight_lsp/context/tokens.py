"""Token counting through the caller's `count_tokens`, memoised per line.

The same lines are counted again on every keystroke; remembering them keeps packing in the
low milliseconds even with a real tokenizer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

_MAX_ENTRIES = 50_000


class TokenCounter:
    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self.count_tokens = count_tokens
        self._memo: OrderedDict[str, int] = OrderedDict()

    def __call__(self, text: str) -> int:
        """Exact count of a whole text (not memoised: prompts change every call)."""
        return self.count_tokens(text) if text else 0

    def piece(self, text: str) -> int:
        """Count of a piece (a line, a snippet): memoised."""
        if not text:
            return 0
        memo = self._memo
        hit = memo.get(text)
        if hit is None:
            hit = memo[text] = self.count_tokens(text)
            if len(memo) > _MAX_ENTRIES:
                memo.popitem(last=False)
        return hit


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


_counters: dict[int, tuple[Callable[[str], int], TokenCounter]] = {}


def counter_for(count_tokens: Callable[[str], int]) -> TokenCounter:
    """One memoising counter per counting function (kept while the function is in use)."""
    key = id(count_tokens)
    hit = _counters.get(key)
    if hit is not None and hit[0] is count_tokens:
        return hit[1]
    counter = TokenCounter(count_tokens)
    if len(_counters) > 8:
        _counters.clear()
    _counters[key] = (count_tokens, counter)
    return counter
