"""A token n-gram model of code: drafts for the passes where the prompt does not repeat itself.

The table holds, for every context of 1..MAX_ORDER tokens seen at least `min_count` times in a
code corpus (tokenized with the model's tokenizer), its two commonest next tokens and their shares;
by default "next token" means the model's own greedy choice there (training/ngrams.py).
Drafting backs off from the longest known context, like any n-gram model. Code is mostly syntax
and idiom (`self.`, `):\\n`, `return None`), which such a table predicts once the model's bonus
token is known, for the cost of a few binary searches. Verification decides, so a wrong draft only
costs its place in the tree.

The embedded model ships a table built from its training corpus; `memosight train ngrams` builds
one for any model from a workspace. Saved as `ngrams.npz` where heads live (heads.heads_folders),
with the fingerprint of the model's LM head, as heads are: token ids only mean something in the
vocabulary they were counted in.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .drafters import MIN_PROBABILITY, DraftCandidate, Drafter, DraftSource, DraftState
from .heads import heads_folders, lm_head_fingerprint

log = logging.getLogger(__name__)

NGRAMS_FILE = "ngrams.npz"
FORMAT_VERSION = 1
MAX_ORDER = 4
_MASK = (1 << 64) - 1
_MULT = 0x9E3779B97F4A7C15
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
PRIOR_WEIGHT = 8.0  # pseudo-counts behind each confidence bucket's prior
SECOND_GUESSES = 30  # first bucket of the second guesses' acceptance counts (see _bucket)


def _finish(h: int) -> int:
    """splitmix64's finaliser: every input bit moves the high half the key is taken from."""
    h = ((h ^ (h >> 30)) * _MIX1) & _MASK
    h = ((h ^ (h >> 27)) * _MIX2) & _MASK
    return h ^ (h >> 31)


def context_key(tokens: Sequence[int]) -> int:
    """32-bit key of a context: a polynomial hash seeded with the context's length, finished by
    a mixer, high half kept. A 2M-entry table then answers a context it never saw with a wrong
    guess ~0.05% of the time, which only costs that draft (verification decides)."""
    h = len(tokens)
    for t in tokens:
        h = (h * _MULT + t + 1) & _MASK
    return _finish(h) >> 32


def context_keys(ids: np.ndarray, order: int) -> np.ndarray:
    """context_key of every `order`-token window of ids, vectorised: uint32 [windows]."""
    count = len(ids) - order + 1
    h = np.full(count, order, dtype=np.uint64)
    for j in range(order):
        h = h * np.uint64(_MULT) + ids[j : j + count].astype(np.uint64) + np.uint64(1)
    h = (h ^ (h >> np.uint64(30))) * np.uint64(_MIX1)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(_MIX2)
    h = h ^ (h >> np.uint64(31))
    return (h >> np.uint64(32)).astype(np.uint32)


class NgramTable:
    """Sorted context keys with their two commonest next tokens and the tokens' shares in 1/255
    (a share of 0: no second token)."""

    def __init__(
        self,
        keys: np.ndarray,
        tokens: np.ndarray,
        shares: np.ndarray,
        *,
        model_fingerprint: str,
        max_order: int = MAX_ORDER,
    ) -> None:
        self.keys = keys  # uint32 [N], ascending
        self.tokens = tokens  # [N, 2], uint16 for vocabularies that fit
        self.shares = shares  # uint8 [N, 2]
        self.model_fingerprint = model_fingerprint
        self.max_order = max_order

    def __len__(self) -> int:
        return len(self.keys)

    def next_tokens(self, tail: Sequence[int]) -> list[tuple[int, float]]:
        """(token, share) of the commonest next tokens after the longest known context."""
        keys = self.keys
        for n in range(min(self.max_order, len(tail)), 0, -1):
            # A numpy scalar of the array's own type: a Python int makes numpy convert the
            # whole array for the comparison, hundreds of times slower (docs/speculative.md).
            key = np.uint32(context_key(tail[-n:]))
            i = int(keys.searchsorted(key))
            if i < len(keys) and keys[i] == key:
                return [
                    (int(t), int(s) / 255.0)
                    for t, s in zip(self.tokens[i], self.shares[i], strict=True)
                    if s > 0
                ]
        return []

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:  # a handle: np.savez would append .npz to other names
            np.savez_compressed(
                fh,
                keys=self.keys,
                tokens=self.tokens,
                shares=self.shares,
                meta=np.array([FORMAT_VERSION, self.max_order]),
                model_fingerprint=np.array(self.model_fingerprint),
            )
        return path

    @classmethod
    def load(cls, path: Path) -> NgramTable:
        """Raises ValueError for a file that is not a table of this format."""
        try:
            with np.load(path, allow_pickle=False) as data:
                version, max_order = (int(x) for x in data["meta"])
                keys, tokens, shares = data["keys"], data["tokens"], data["shares"]
                fingerprint = str(data["model_fingerprint"])
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"unreadable n-gram table {path}: {err}") from err
        if version != FORMAT_VERSION:
            raise ValueError(f"n-gram table {path} has format {version}, not {FORMAT_VERSION}")
        if (
            keys.dtype != np.uint32
            or tokens.shape != (len(keys), 2)
            or shares.shape != (len(keys), 2)
            or bool(np.any(keys[1:] <= keys[:-1]))
        ):
            raise ValueError(f"n-gram table {path} is corrupt")
        return cls(
            keys,
            tokens,
            shares.astype(np.uint8),
            model_fingerprint=fingerprint,
            max_order=max_order,
        )


def find_ngram_table(model: Any) -> NgramTable | None:
    """The table saved for this model, if any (next to the model or in the cache)."""
    fingerprint = lm_head_fingerprint(model)
    vocab = int(model.get_output_embeddings().out_features)
    for folder in heads_folders(model):
        path = folder / NGRAMS_FILE
        if not path.is_file():
            continue
        try:
            table = NgramTable.load(path)
        except ValueError as err:
            log.warning("ignoring %s", err)
            continue
        if table.model_fingerprint != fingerprint:
            log.info("n-gram table %s was built for another model; not using it", path)
            continue
        if len(table) and int(table.tokens.max()) >= vocab:
            log.warning("ignoring n-gram table %s: token ids beyond the vocabulary", path)
            continue
        log.info("using an n-gram table of %d contexts from %s", len(table), path)
        return table
    return None


def _bucket(share: float, depth: int, second: bool = False) -> int:
    """Acceptance counts are kept per share decile, for first guesses also per depth (0, 1, 2+):
    deeper in a chain that was right so far the table is right more often than its share says
    (on held-out code; figures: docs/speculative.md)."""
    decile = min(int(share * 10), 9)
    return SECOND_GUESSES + decile if second else 10 * min(depth, 2) + decile


class NgramDrafter(Drafter):
    """The table's first guesses after the committed tokens as a chain, and each second guess as
    a detour that again follows first guesses for a few tokens. A share becomes an acceptance
    probability through online counts per share decile (first guesses also per depth, second
    guesses apart; see _bucket), starting from the share itself."""

    def __init__(self, table: NgramTable, max_depth: int = 12, detour_depth: int = 3) -> None:
        self.table = table
        self.max_depth = max_depth
        self.detour_depth = detour_depth
        self.proposed = [0.0] * (SECOND_GUESSES + 10)
        self.accepted = [0.0] * (SECOND_GUESSES + 10)
        self._last: list[tuple[int, int]] = []  # (token, bucket) of the last chain
        self._detours: list[tuple[int, int, int]] = []  # (depth, token, bucket) of its detours

    def rate(self, bucket: int) -> float:
        prior = ((bucket % 10) + 0.5) / 10
        return (self.accepted[bucket] + prior * PRIOR_WEIGHT) / (
            self.proposed[bucket] + PRIOR_WEIGHT
        )

    def _follow(
        self, tail: list[int], p: float, steps: int, depth: int = 0
    ) -> tuple[list[int], list[float], list[int], list[tuple[int, float]]]:
        """Up to `steps` first guesses after `tail` (the first at `depth` in the tree) while the
        path stays likely: (tokens, cumulative probabilities, buckets, the second guess at each
        step or (-1, 0))."""
        order = self.table.max_order
        tokens: list[int] = []
        probs: list[float] = []
        buckets: list[int] = []
        seconds: list[tuple[int, float]] = []
        for _ in range(steps):
            guesses = self.table.next_tokens(tail)
            if not guesses:
                break
            token, share = guesses[0]
            bucket = _bucket(share, depth + len(tokens))
            p *= self.rate(bucket)
            if p < MIN_PROBABILITY:
                break
            tokens.append(token)
            probs.append(p)
            buckets.append(bucket)
            seconds.append(guesses[1] if len(guesses) > 1 else (-1, 0.0))
            tail = [*tail[1:], token] if len(tail) >= order else [*tail, token]
        return tokens, probs, buckets, seconds

    def candidates(self, committed: Sequence[int], limit: int) -> list[DraftCandidate]:
        order = self.table.max_order
        tail = list(committed[-order:])
        steps = min(limit, self.max_depth)
        chain, probs, buckets, seconds = self._follow(tail, 1.0, steps)
        self._last = list(zip(chain, buckets, strict=True))
        self._detours = []
        out = [DraftCandidate(tokens=chain, probs=probs, source="corpus")] if chain else []
        for depth, (second, share) in enumerate(seconds):
            if second < 0:
                continue
            bucket = _bucket(share, depth, second=True)
            q = (probs[depth - 1] if depth else 1.0) * self.rate(bucket)
            if q < MIN_PROBABILITY:
                continue
            self._detours.append((depth, second, bucket))
            path = [*tail, *chain[:depth], second][-order:]
            more = min(self.detour_depth, steps - depth - 1)
            rest, rest_probs, _, _ = self._follow(path, q, more, depth + 1)
            out.append(
                DraftCandidate(
                    tokens=[*chain[:depth], second, *rest],
                    probs=[*probs[:depth], q, *rest_probs],
                    source="corpus",
                )
            )
        return out

    def feedback(self, truth: Sequence[int]) -> None:
        """The model's actual next tokens after the last candidates() call."""
        matched = 0
        for (token, bucket), actual in zip(self._last, truth, strict=False):
            self.proposed[bucket] += 1.0
            if token != actual:
                break
            self.accepted[bucket] += 1.0
            matched += 1
        for depth, token, bucket in self._detours:
            if depth <= matched and depth < len(truth):  # reached: its parent was right
                self.proposed[bucket] += 1.0
                self.accepted[bucket] += float(truth[depth] == token)
        self._last, self._detours = [], []


class CorpusNgrams(DraftSource):
    """The draft source of an n-gram table: the one saved for the model ("auto", see
    find_ngram_table) or the one given. Its priors are the table's own shares."""

    name = "corpus"

    def __init__(self, table: NgramTable | Literal["auto"] = "auto") -> None:
        self.table = table
        self.drafter: NgramDrafter | None = None

    def fit(self, model: Any) -> bool:
        table = find_ngram_table(model) if self.table == "auto" else self.table
        self.drafter = NgramDrafter(table) if table is not None else None
        return self.drafter is not None

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        return self.drafter.candidates(state.committed, room) if self.drafter else []

    def feedback(self, truth: Sequence[int]) -> None:
        if self.drafter is not None:
            self.drafter.feedback(truth)
