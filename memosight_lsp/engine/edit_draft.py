"""The text being rewritten as a draft source: a rewrite is mostly a copy ("speculative edits").

A next-edit rewrite writes a window of the buffer again with a change or two. WindowDraft holds
the window's current tokens and, at every pass, proposes the rest of them from where the rewrite
is now: it follows the old tokens while the model copies them, and after a change it finds its
place again by matching the rewrite's last tokens in the old ones, nearest after the place it
lost (without a match: as far on as the rewrite has gone since, as if as many tokens changed).
The verification decides as for any source, so the output stays greedy's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from .drafters import MIN_PROBABILITY, AcceptanceStats, DraftCandidate, DraftSource, DraftState

# Acceptance priors per bucket: "copying" (the rewrite matched the old text up to here) and
# "resynced" (found its place again after a change).
COPYING, RESYNCED = 1, 2
PRIORS = {("window", COPYING): 0.92, ("window", RESYNCED): 0.6}
RESYNC_NGRAM = (4, 3, 2)  # the rewrite's last n tokens that must match the old ones to resync


class WindowDraft(DraftSource):
    """Proposes the continuation of `target` (the old window's tokens) aligned to the tokens
    generated so far. set_target() before each call; one call at a time."""

    name = "window"
    priors: ClassVar[dict[tuple[str, int], float]] = PRIORS

    def __init__(self, target: Sequence[int] = ()) -> None:
        self.stats = AcceptanceStats(dict(self.priors))
        self.target: list[int] = list(target)
        self._grams: dict[tuple[int, ...], list[int]] = {}
        self._pos: int | None = 0  # where the old tokens go on; None: lost after a change
        self._seen = 0  # generated tokens already aligned
        self._lost: int | None = None  # where the copy was last lost (None: never)
        self._lost_at = 0  # the generated token that lost it
        self._run = 0  # tokens copied since
        self._bucket = COPYING
        self._last: list[DraftCandidate] = []
        self.set_target(target)

    def set_target(self, target: Sequence[int]) -> None:
        """The old window's tokens, as the rewrite is expected to start them."""
        self.target = list(target)
        grams: dict[tuple[int, ...], list[int]] = {}
        for n in RESYNC_NGRAM:
            for end in range(n, len(self.target) + 1):
                grams.setdefault(tuple(self.target[end - n : end]), []).append(end)
        self._grams = grams

    def start(self, state: DraftState) -> None:
        self._pos, self._seen, self._lost, self._lost_at = 0, 0, None, 0
        self._run, self._bucket = 0, COPYING

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        generated = state.committed[state.prompt_len :]
        self._align(generated)
        self._last = []
        if self._pos is None or self._pos >= len(self.target):
            return []
        bucket = ("window", self._bucket)
        rate = self.stats.rate(bucket)
        probs: list[float] = []
        p = 1.0
        for _ in range(min(room, len(self.target) - self._pos)):
            p *= rate
            if p < MIN_PROBABILITY:
                break
            probs.append(p)
        if not probs:
            return []
        tokens = self.target[self._pos : self._pos + len(probs)]
        self._last = [DraftCandidate(tokens=tokens, probs=probs, source=self.name, bucket=bucket)]
        return self._last

    def _align(self, generated: Sequence[int]) -> None:
        """Move the place in the old tokens along the tokens generated since the last pass."""
        target = self.target
        for i in range(self._seen, len(generated)):
            pos = self._pos
            if pos is not None and pos < len(target) and target[pos] == generated[i]:
                self._pos = pos + 1
                self._run += 1
                continue
            if pos is not None:
                self._lost, self._lost_at = pos, i
            self._pos, self._run = None, 0
        self._seen = len(generated)
        if self._pos is None:
            lost = self._lost or 0
            # No match of the tail: guess a change of as many tokens as were written since.
            self._pos = self._resync(generated, lost) or lost + len(generated) - self._lost_at
        # Copying since the start, or for a while since the last change: likely to go on.
        self._bucket = COPYING if self._lost is None or self._run >= 4 else RESYNCED

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

    def feedback(self, truth: Sequence[int]) -> None:
        self.stats.update(self._last, truth, len(truth))
        self._last = []
