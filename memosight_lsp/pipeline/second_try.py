"""One more decode when the post-processing threw the first answer away, or cut it, for a token
the model could have chosen otherwise: the same prompt (in the buffer's cache by then) decoded
again with that one choice taken away, so the model's next-best token goes there.

- `next_line`: on a blank line the model wrote the code of the line below instead of this one
  (postprocess.repeats_next_line): the answer is dropped; the second decode may not begin the
  line's code with the same text (`return`, however the tokenizer gets there: ` return`, more
  indentation and `return`, `ret` + `urn`).
- `closer`: a one-line answer was cut before a closing bracket that closes nothing the line or
  the code above opened (postprocess.cut_unmatched_closer: `source_location(loc)});` where only
  a `(` is open): the person would be shown the line without its end. The second decode may not
  put that bracket at that place, so `source_location(loc));` can follow.

Each is at most one more decode of one request (no loop), and none follows a cancelled or
timed-out decode. A second answer goes through the same post-processing; after `closer` it is
kept only when it adds to the cut line (`adds_to`): the model may write another stray bracket
before the first one's place, and a shorter line is no better.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memosight_lsp.inference.decoder import AllowedTokens, Generation

from . import postprocess
from .policy import CursorSituation

GeneratedText = Callable[[Sequence[int]], str]  # the answer's text of some generated tokens


def finished(generation: Generation) -> bool:
    """The decode ended by itself: no second try after a cancel or the request's time."""
    return bool(generation.tokens) and generation.stop_reason not in ("cancelled", "time")


def adds_to(first: str, second: str) -> bool:
    """The second try's answer is the first one's line and more: the only kind kept, so the try
    never shows less than the cut line did."""
    return len(second) > len(first) and second.startswith(first)


def progress_beyond(
    first: str,
    progress: Callable[[Sequence[int]], None] | None,
    shown: GeneratedText,
) -> Callable[[Sequence[int]], None] | None:
    """The second decode's progress callback (StopRules.progress): it hands on only what shows
    a line that begins with the first answer's cut one (`shown`: the text a partial answer
    would show), so a person is never shown a line the second try would not keep."""
    if progress is None:
        return None

    def report(tokens: Sequence[int]) -> None:
        if shown(tokens).startswith(first):
            progress(tokens)

    return report


class Ban:
    """Tokens taken away at one step of a second decode, from whatever else constrains that
    step. The list of every other token is built once, when a step has no other constraint,
    and kept: both constraints below meet the same ban at many steps."""

    def __init__(self, banned: frozenset[int], vocabulary_size: int) -> None:
        self.banned = banned
        self.vocabulary_size = vocabulary_size
        self._rest: list[int] | None = None

    def apply(self, base: Sequence[int] | None) -> Sequence[int] | None:
        """The tokens `base` allows (every one when None) but the banned ones."""
        if not self.banned:
            return base
        if base is not None:
            return [t for t in base if t not in self.banned]
        if self._rest is None:
            self._rest = [t for t in range(self.vocabulary_size) if t not in self.banned]
        return self._rest


def next_line(
    generation: Generation,
    raw: str,
    text: str,
    situation: CursorSituation,
    constraint: AllowedTokens | None,
    generated_text: GeneratedText,
    vocabulary: Callable[[], Sequence[str | None]],
) -> AllowedTokens | None:
    """After a finished answer dropped for repeating the next line, the constraint under which
    the second decode begins the line's code another way; else None. While the answer is only
    line breaks and indentation, or its code so far is the start of the first decode's opening
    token (`return` from ` return`), no token may make the code begin with that token's text:
    banning the one token alone let the model write the same line after one more space (a token
    of more indentation, then ` return`), which is dropped again and leaves the person nothing.
    `vocabulary`: each token's text, asked for only when there is a second try."""
    if text or not finished(generation):
        return None
    if not postprocess.repeats_next_line(postprocess.skip_blank_start(raw, situation), situation):
        return None
    tokens = list(generation.tokens)
    # The first token that brings the line's code (the ones before: line breaks, indent).
    start = next((k for k in range(len(tokens)) if generated_text(tokens[: k + 1]).strip()), 0)
    opening = generated_text(tokens[: start + 1]).strip()
    if not opening:
        return None
    pieces = vocabulary()
    by_code: dict[str, Ban] = {}

    def at_code(code: str) -> Ban:
        """The tokens that would make code written so far (`code`) begin with `opening`."""
        if code not in by_code:
            banned = frozenset(
                t
                for t, p in enumerate(pieces)
                if p is not None and (code + p if code else p.lstrip()).startswith(opening)
            )
            by_code[code] = Ban(banned, len(pieces))
        return by_code[code]

    def allowed(so_far: Sequence[int]) -> Sequence[int] | None:
        base = constraint(so_far) if constraint is not None else None
        code = generated_text(so_far).lstrip()
        if not opening.startswith(code) or len(code) >= len(opening):
            return base  # the code went another way: nothing to keep it from
        return at_code(code).apply(base)

    return allowed


def closer(
    generation: Generation,
    raw: str,
    situation: CursorSituation,
    multiline: bool,
    constraint: AllowedTokens | None,
    decode: Callable[[Sequence[int]], str],
    healed: str,
    vocabulary: Callable[[], Sequence[str | None]],
) -> AllowedTokens | None:
    """After a finished one-line answer cut before a closer that closes nothing, the constraint
    under which the second decode writes no answer with the same text before that closer and
    the closer there: whenever the text so far is the first answer's up to some place before
    it, no token whose text would put the closer at its place (`}` alone, `)}` or `});`,
    however the tokenizer splits it); else None. `decode`: the tokenizer's decode, whose text
    starts with `healed` (the prompt's backed-off text, not part of the answer); `vocabulary`:
    each token's text (healing.VocabularyText), asked for only when there is a cut: building it
    takes a moment, and most answers have none."""
    if multiline or not finished(generation):
        return None
    at = postprocess.cut_closer_at(raw, situation)
    if at is None:
        return None
    pieces = vocabulary()
    bracket = raw[at]
    before = raw[:at]
    # Tokens whose text holds the bracket, found once; then per offset into a token's text the
    # ones with the bracket there.
    holders = [(t, p) for t, p in enumerate(pieces) if p is not None and bracket in p]
    by_offset: dict[int, Ban] = {}

    def at_offset(into: int) -> Ban:
        if into not in by_offset:
            banned = frozenset(t for t, p in holders if len(p) > into and p[into] == bracket)
            by_offset[into] = Ban(banned, len(pieces))
        return by_offset[into]

    def allowed(so_far: Sequence[int]) -> Sequence[int] | None:
        base = constraint(so_far) if constraint is not None else None
        text = decode(list(so_far))
        if len(text) < len(healed):
            return base
        text = text[len(healed) :]
        if not before.startswith(text):
            return base  # the answer went another way: nothing to keep it from
        return at_offset(len(before) - len(text)).apply(base)

    return allowed
