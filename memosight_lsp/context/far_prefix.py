"""The part of a long file far above the cursor, compressed instead of cut off.

Cutting a long prefix to the budget keeps the lines nearest the cursor and loses everything above
them: the imports, the helpers defined at the top, the class whose method is being written. Here
that far part is split into top-level blocks (a function, a class, a run of imports or
assignments); each block can step down from its full text to its signature summary (decorators,
`def` / `class` headers, a class keeping its methods' headers) and then to nothing, the least
relevant block first (`recursive.fit`), until the far part fits its share of the budget. A block
is relevant when it defines a name used in the lines near the cursor (or one that starts with the
word being typed at the cursor), then by shared identifiers, then by closeness.
"""

from __future__ import annotations

import functools
import keyword
import re
from dataclasses import dataclass

from .lexical import identifiers, jaccard
from .recursive import Unit, fit, signature_summary
from .tokens import TokenCounter, grow_upward

# A block that defines a name used near the cursor outranks any lexical overlap; one defining a
# name that completes the word being typed outranks those (many blocks define some name used in
# a long stretch of nearby code, few the one being typed).
DEFINES_USED_NAME = 2.0
COMPLETES_TYPED_WORD = 4.0
CLOSENESS_WEIGHT = 0.1
NEAR_SHARE = 0.5  # of the budget kept verbatim right above the cursor
MAX_SIMPLE_RUN = 24  # one-line statements (imports, constants) grouped into blocks of this size
MEMO_BLOCKS = 4096  # blocks whose summary and identifiers are remembered
# Blocks are counted only while the shortest forms of the more relevant ones stay within this
# many characters per budget token: a token is a few characters, so the rest could never fit
# and would only be counted to be dropped (in a file of thousands of lines, that counting was
# most of the packing's time).
CHARS_PER_TOKEN_REACH = 16

# Names a line defines: a def or class at any depth (a method used as self.name counts), or an
# unindented assignment.
_DEFINED = re.compile(r"^\s*(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*[:=]")
_TRAILING_WORD = re.compile(r"[A-Za-z_]\w*\Z")
# Unindented lines that continue the statement above: closing brackets, else/elif/except/finally.
_CONTINUATION = re.compile(r"^([)\]}]|(else|elif|except|finally)\b)")


def top_level_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """[start, end) line spans covering `lines`: a block starts at an unindented code line
    (decorators stay with what they decorate); runs of one-line statements group together."""
    starts = []
    for i, line in enumerate(lines):
        if not line or line[0].isspace() or _CONTINUATION.match(line):
            continue
        if i > 0 and lines[i - 1].startswith("@"):
            continue  # decorated definition: the block began at its first decorator
        starts.append(i)
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    merged: list[tuple[int, int]] = []
    run_open = False  # the last block is a run of one-line statements that may grow
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        simple = _simple(lines, start, end)
        if run_open and simple and end - merged[-1][0] <= MAX_SIMPLE_RUN:
            merged[-1] = (merged[-1][0], end)
            continue
        merged.append((start, end))
        run_open = simple
    return merged


def _simple(lines: list[str], start: int, end: int) -> bool:
    """A block of one statement line (plus blank lines): an import, a constant."""
    return sum(1 for line in lines[start:end] if line.strip()) <= 1


def summarize_above(
    lines: list[str], end: int, near: str, budget: int, counter: TokenCounter
) -> str:
    """lines[:end] compressed to at most `budget` tokens (as counted piece by piece), relevance
    judged against `near`, the text kept verbatim below them. Returns "" if nothing fits."""
    return _summary(lines, end, near, budget, counter)[0]


def _summary(
    lines: list[str], end: int, near: str, budget: int, counter: TokenCounter
) -> tuple[str, int]:
    """summarize_above's text and its token count (block by block)."""
    if end <= 0 or budget <= 0:
        return "", 0
    near_words = set(identifiers(near))
    typed = _typed_word(near)
    units = []
    for start, stop in top_level_blocks(lines[:end]):
        text = "".join(line + "\n" for line in lines[start:stop])
        facts = _facts(text)
        score = jaccard(facts.words, near_words) + CLOSENESS_WEIGHT * stop / end
        if typed is not None and any(name.startswith(typed) for name in facts.defined):
            score += COMPLETES_TYPED_WORD
        elif facts.defined & near_words:
            score += DEFINES_USED_NAME
        units.append(Unit(key=f"{start:08d}", levels=facts.levels, score=score))
    fitted = fit(_within_reach(units, budget), budget, counter.piece, refill=True)
    if fitted.tokens > budget:
        return "", 0
    return fitted.text(), fitted.tokens


def _within_reach(units: list[Unit], budget: int) -> list[Unit]:
    """The most relevant units whose shortest non-empty forms could fit (CHARS_PER_TOKEN_REACH),
    in their order in the file."""
    room = budget * CHARS_PER_TOKEN_REACH
    kept: set[int] = set()
    for i in sorted(range(len(units)), key=lambda i: -units[i].score):
        shortest = len(units[i].levels[-2])
        if shortest <= room:
            room -= shortest
            kept.add(i)
    return [unit for i, unit in enumerate(units) if i in kept]


@dataclass(frozen=True, slots=True)
class _BlockFacts:
    levels: tuple[str, ...]  # full text, signature summary (when it differs), ""
    words: frozenset[str]
    defined: frozenset[str]


@functools.lru_cache(maxsize=MEMO_BLOCKS)
def _facts(text: str) -> _BlockFacts:
    """What scoring and fitting need from a block, memoised: blocks far above the cursor stay
    the same from one keystroke to the next."""
    summary = signature_summary(text)
    levels = (text, summary, "") if summary and summary != text else (text, "")
    defined = frozenset(name for line in text.splitlines() for name in _defined(line))
    return _BlockFacts(levels=levels, words=frozenset(identifiers(text)), defined=defined)


def _typed_word(near: str) -> str | None:
    """The identifier the text ends in (the word being typed at the cursor), if 3+ long: a
    block defining a name that starts with it is what the completion is likely to need."""
    match = _TRAILING_WORD.search(near)
    return match.group(0) if match and len(match.group(0)) >= 3 else None


def _defined(line: str) -> list[str]:
    match = _DEFINED.match(line)
    if match is None:
        return []
    return [name for name in match.groups() if name and not keyword.iskeyword(name)]


def split_prefix(
    lines: list[str], budget: int, counter: TokenCounter, near_share: float = NEAR_SHARE
) -> tuple[int, str, str]:
    """(first near line, far text, near text) for a prefix given as its lines (the last one is
    the cursor line up to the cursor): the nearest lines get `near_share` of the budget and the
    lines above them are summarized into the rest. Room the summary leaves (a big block that
    only fits as its signatures) goes back to the near lines."""
    near_budget = int(budget * near_share)
    start, far, near = len(lines) - 1, "", lines[-1]
    for _ in range(3):
        last = len(lines) - 1
        start, used = grow_upward(lines, last, counter.piece(lines[last]), near_budget, counter)
        near = "\n".join(lines[start:])
        far, far_used = _summary(lines, start, near, budget - used, counter)
        spare = budget - used - far_used
        if spare < max(16, budget // 32) or start == 0:
            break
        near_budget = used + spare
    return start, far, near


def compress_prefix(
    text: str, budget: int, counter: TokenCounter, near_share: float = NEAR_SHARE
) -> str:
    """`text` (everything before the cursor) in at most `budget` tokens: whole when it fits;
    otherwise split_prefix's far summary and near lines."""
    if counter(text) <= budget:
        return text
    lines = text.split("\n")
    start, far, near = split_prefix(lines, budget, counter, near_share)
    # Pieces are counted apart; the joined text can count a little differently, so shrink
    # the far part by what the whole is over until it fits.
    for _ in range(4):
        over = counter(far + near) - budget
        if over <= 0:
            return far + near
        far = summarize_above(lines, start, near, counter(far) - max(over, 1), counter)
    while start < len(lines) - 1 and counter(near) > budget:
        start += 1
        near = "\n".join(lines[start:])
    return near
