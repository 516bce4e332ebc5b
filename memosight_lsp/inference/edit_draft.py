"""The text being rewritten as a draft source: a rewrite is mostly a copy ("speculative edits").

A next-edit rewrite writes a window of the buffer again with a change or two. WindowDraft holds
the window's current tokens and, at every pass, proposes the rest of them from where the rewrite
is now: it follows the old tokens while the model copies them, and after a change it finds its
place again by matching the rewrite's last tokens in the old ones, nearest after the place it
lost (without a match: as far on as the rewrite has gone since, as if as many tokens changed).
The verification decides as for any source, so the output stays greedy's.

Reconverged is a stop rule on the same place-finding (CopyPlace): true once the rewrite has
written a change and then copied the old tokens again across a line end, RESYNC_TOKENS more and
on to a line end.
CopyBound is a stop rule on it too, a policy rather than a lossless one: true once the rewrite,
copying (from the start, or RESYNC_TOKENS since it found its place again after a change), has
copied the old tokens across the line end of a given old line: the lines far below the cursor and
the edits are not waited for.
What follows is taken as the old text, unchanged (`rest`: the old tokens from the place it has
copied to); it only ends the decode earlier, so every token written is still the model's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from .drafters import MIN_PROBABILITY, AcceptanceStats, DraftCandidate, DraftSource, DraftState

# Acceptance priors per bucket: "copying" (the rewrite matched the old text up to here) and
# "resynced" (found its place again after a change).
COPYING, RESYNCED = 1, 2
PRIORS = {("window", COPYING): 0.92, ("window", RESYNCED): 0.6}
RESYNC_NGRAM = (4, 3, 2)  # the rewrite's last n tokens that must match the old ones to resync
# Old tokens a rewrite copies after the first line end that follows a change before it counts as
# back on the old text, and it stops only at the next line end after them: the line end
# completes the changed line, and the whole line(s) copied after it show the change has no tail
# (a line that starts like the old one and differs later is not taken for the copy) and hold
# the comparison with the old lines in place (difflib aligns the changed line between two
# copied ones). About one line of code: less than a pass of copying.
RESYNC_TOKENS = 12


class CopyPlace:
    """Where a rewrite is in the old tokens (`target`), followed token by token: `pos` is the
    next old token while it copies; after a change (`lost`: the old place it lost, None while it
    never has) it is found again by the rewrite's last RESYNC_NGRAM tokens in the old ones, else
    guessed as far on as the rewrite has gone since. `run`: tokens copied since that place."""

    def __init__(self, target: Sequence[int] = ()) -> None:
        self.target = list(target)
        grams: dict[tuple[int, ...], list[int]] = {}
        for n in RESYNC_NGRAM:
            for end in range(n, len(self.target) + 1):
                grams.setdefault(tuple(self.target[end - n : end]), []).append(end)
        self._grams = grams
        self.reset()

    def reset(self) -> None:
        self.pos = 0  # where the old tokens go on
        self.lost: int | None = None  # where the copy was last lost (None: never)
        self.lost_at = 0  # the generated token that lost it
        self.run = 0  # tokens copied since pos was last found
        self._seen = 0  # generated tokens already followed

    def follow(self, generated: Sequence[int]) -> None:
        """Move the place in the old tokens along the tokens generated since the last call."""
        target = self.target
        pos: int | None = self.pos
        for i in range(self._seen, len(generated)):
            if pos is not None and pos < len(target) and target[pos] == generated[i]:
                pos += 1
                self.run += 1
                continue
            if pos is not None:
                self.lost, self.lost_at = pos, i
            pos, self.run = None, 0
        self._seen = len(generated)
        if pos is None:
            lost = self.lost or 0
            # No match of the tail: guess a change of as many tokens as were written since.
            pos = self._resync(generated, lost) or lost + len(generated) - self.lost_at
        self.pos = pos

    def _resync(self, generated: Sequence[int], near: int) -> int | None:
        """The old position after the longest match of the rewrite's tail, the first at or after
        `near` (the place the copy was lost), else the last before it."""
        for n in RESYNC_NGRAM:
            if len(generated) < n:
                continue
            ends = self._grams.get(tuple(generated[-n:]))
            if not ends:
                continue
            after = [e for e in ends if e >= near]
            return after[0] if after else ends[-1]
        return None


class WindowDraft(DraftSource):
    """Proposes the continuation of `target` (the old window's tokens) aligned to the tokens
    generated so far. set_target() before each call; one call at a time."""

    name = "window"
    priors: ClassVar[dict[tuple[str, int], float]] = PRIORS

    def __init__(self, target: Sequence[int] = ()) -> None:
        self.stats = AcceptanceStats(dict(self.priors))
        self.place = CopyPlace(target)
        self.copy_left: Callable[[], int | None] | None = None
        self._bucket = COPYING
        self._last: list[DraftCandidate] = []

    @property
    def target(self) -> list[int]:
        return self.place.target

    def set_target(
        self, target: Sequence[int], copy_left: Callable[[], int | None] | None = None
    ) -> None:
        """The old window's tokens, as the rewrite is expected to start them. `copy_left` (a
        stop rule's, e.g. CopyBound.copy_left): how many more tokens the rewrite writes before
        the rule stops it when it copies on (None: it would not stop); the draft ends there,
        since a verified token past the stop is discarded (a row of the pass for nothing)."""
        self.place = CopyPlace(target)
        self.copy_left = copy_left

    def start(self, state: DraftState) -> None:
        self.place.reset()
        self._bucket = COPYING

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        place = self.place
        place.follow(state.committed[state.prompt_len :])
        # Copying since the start, or for a while since the last change: likely to go on.
        self._bucket = COPYING if place.lost is None or place.run >= 4 else RESYNCED
        self._last = []
        if place.pos >= len(place.target):
            return []
        bucket = ("window", self._bucket)
        rate = self.stats.rate(bucket)
        probs: list[float] = []
        p = 1.0
        left = len(place.target) - place.pos
        stop = self.copy_left() if self.copy_left is not None else None
        for _ in range(min(room, left, left if stop is None else stop)):
            p *= rate
            if p < MIN_PROBABILITY:
                break
            probs.append(p)
        if not probs:
            return []
        tokens = place.target[place.pos : place.pos + len(probs)]
        self._last = [DraftCandidate(tokens=tokens, probs=probs, source=self.name, bucket=bucket)]
        return self._last

    def feedback(self, truth: Sequence[int]) -> None:
        self.stats.update(self._last, truth, len(truth))
        self._last = []


class Reconverged:
    """Stop rule (StopRules.should_stop shape: all new tokens so far -> bool) of a rewrite of
    `target` (the old tokens; `line_ends[i]`: old token i holds a line end): true at the token
    where the rewrite, after it last left the old tokens, has copied them again across a line
    end, RESYNC_TOKENS more and on to the end of a line; once per change. Never true while the
    rewrite has changed nothing: a copy to the end marker ends as it does. One rewrite per
    instance."""

    def __init__(self, target: Sequence[int], line_ends: Sequence[bool]) -> None:
        self.place = CopyPlace(target)
        self._line_ends = list(line_ends)
        # next_end[i]: the first old token at or after i that holds a line end (len: none).
        self._next_end = [len(line_ends)] * (len(line_ends) + 1)
        for i in range(len(line_ends) - 1, -1, -1):
            self._next_end[i] = i if line_ends[i] else self._next_end[i + 1]
        self._fired: int | None = None  # lost_at of the change it was last true after

    def __call__(self, generated: Sequence[int]) -> bool:
        place = self.place
        place.follow(generated)
        if place.lost is None or place.lost_at == self._fired or place.run == 0:
            return False
        start = place.pos - place.run  # the copy since the change, old tokens [start, pos)
        end = self._next_end[min(start, len(self._next_end) - 1)]
        last = place.pos - 1  # the old token just copied
        if last - end < RESYNC_TOKENS or not self._line_ends[last]:
            return False
        self._fired = place.lost_at
        return True

    def rest(self) -> list[int]:
        """The old tokens after the place the rewrite has copied to: what it is taken to write
        on when it stops here."""
        return self.place.target[self.place.pos :]


class CopyBound:
    """Stop rule (StopRules.should_stop shape) of a rewrite of `target` (the old tokens;
    `line_ends[i]`: old token i holds a line end): true at the token where the rewrite, copying
    the old tokens (from the start, or for RESYNC_TOKENS since it found its place again after a
    change), has just copied a line end at or past old token `bound` (the token that ends the
    last line to wait for). Every token written is the model's; the old lines after `bound` are
    taken as written (`rest`), so a change the model would have written there is not seen. One
    rewrite per instance."""

    def __init__(self, target: Sequence[int], line_ends: Sequence[bool], bound: int) -> None:
        self.place = CopyPlace(target)
        self._line_ends = list(line_ends)
        self.bound = bound
        # next_end[i]: the first old token at or after i that holds a line end (len: none).
        self._next_end = [len(line_ends)] * (len(line_ends) + 1)
        for i in range(len(line_ends) - 1, -1, -1):
            self._next_end[i] = i if line_ends[i] else self._next_end[i + 1]

    def __call__(self, generated: Sequence[int]) -> bool:
        place = self.place
        place.follow(generated)
        if place.run == 0 or (place.lost is not None and place.run < RESYNC_TOKENS):
            return False
        last = place.pos - 1  # the old token just copied
        return last >= self.bound and self._line_ends[last]

    def copy_left(self) -> int | None:
        """How many more tokens the rewrite writes before this rule stops it, when it copies
        the old tokens on from where it is (the place as this rule followed the tokens so far,
        one call per token as the decoder makes them): up to the first line end at or past
        `bound` where the copy counts (RESYNC_TOKENS after a change); None when the old tokens
        end first."""
        place = self.place
        need = max(self.bound, place.pos)
        if place.lost is not None:
            need = max(need, place.pos + RESYNC_TOKENS - place.run - 1)
        end = self._next_end[min(need, len(self._line_ends))]
        return end - place.pos + 1 if end < len(self._line_ends) else None

    def rest(self) -> list[int]:
        """The old tokens after the place the rewrite has copied to."""
        return self.place.target[self.place.pos :]


def line_end_token(newlines: Sequence[int], line: int) -> int | None:
    """The index of the token holding the end of line `line` (0-based) of a text whose tokens
    hold `newlines[i]` line ends each; None when the text has no such line end."""
    seen = 0
    for i, count in enumerate(newlines):
        seen += count
        if seen > line:
            return i
    return None
