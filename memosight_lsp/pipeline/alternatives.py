"""The items of an inline completion beside the greedy one: the decoder's branches (other likely
first tokens continued a few tokens, inference/branches.py) as the editor would show them.

A branch is post-processed like the greedy text: a branch that ended by itself (a stop token, the
stop rule) is trimmed as a finished completion, one cut by its token cap or the time bound is cut
at its last whole line or word, as a partial answer is. An item is kept only when, after that and
with trailing whitespace ignored, it is non-empty and neither equal to nor a prefix of an item
before it (the greedy one first), nor has one of them as its prefix: typing through one item must
never just show another. At most `limit` items in all, the greedy one included.
"""

from __future__ import annotations

from collections.abc import Iterable


def distinct(first: str, candidates: Iterable[str], limit: int) -> list[str]:
    """The candidates worth showing after `first`, in order: at most limit - 1 of them."""
    kept = [first.rstrip()]
    out: list[str] = []
    for text in candidates:
        if len(out) >= limit - 1:
            break
        key = text.rstrip()
        if not key.strip() or any(k.startswith(key) or key.startswith(k) for k in kept):
            continue
        kept.append(key)
        out.append(text)
    return out
