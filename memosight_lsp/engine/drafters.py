"""Draft tokens for speculative decoding, merged into one candidate tree sized by a cost model.

Sources (each proposes candidate continuations of the committed tokens):
- `prompt`: n-gram lookup in the prompt and the tokens generated so far (code repeats itself);
- `previous`: the last suggestion made for this buffer (the user often types it through);
- `workspace`: n-gram lookup in other text of the workspace, given as token ids;
- `heads`: the top-k tokens of the Medusa-style prediction heads (see heads.py).

Every candidate token carries an estimated acceptance probability from online counts per source
and match length (calibrated as decoding goes, starting from a prior). The tree keeps the likeliest
nodes, as many as maximise expected tokens per millisecond, with the cost of a pass over q tokens
measured on the device (CostModel.calibrate). When no draft is likely enough, the pass is a plain
one-token step: drafting turns itself off where it does not pay.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .timing import affordable_turns, check

if TYPE_CHECKING:
    import torch

MAX_NGRAM = 3
OTHER = 10  # added to the match length of second guesses (their own acceptance counts)
# Prior per-token acceptance rates before any counts (pseudo-counts of PRIOR_WEIGHT tokens).
PRIORS = {
    ("previous", 3): 0.8,
    ("previous", 2): 0.7,
    ("previous", 1): 0.5,
    ("prompt", 3): 0.6,
    ("prompt", 2): 0.45,
    ("prompt", 1): 0.25,
    ("workspace", 3): 0.5,
    ("workspace", 2): 0.35,
    ("workspace", 1): 0.15,
}
PRIOR_WEIGHT = 8.0
MIN_PROBABILITY = 0.02  # below this a node is never worth drafting


@dataclass(kw_only=True)
class DraftCandidate:
    """One drafted continuation of the committed tokens, as one source proposes it."""

    tokens: list[int]
    probs: list[float]  # cumulative probability that the path up to each token is accepted
    source: str
    bucket: tuple[str, int] | None = None  # key of the acceptance counts it updates


@dataclass(kw_only=True)
class DraftTree:
    """Nodes 1..n of a verification pass; node 0 is the last committed token (the root)."""

    tokens: list[int] = field(default_factory=list)  # token of node i+1
    parents: list[int] = field(default_factory=list)  # input index of the parent of node i+1
    depths: list[int] = field(default_factory=list)  # depth of node i+1 (root children: 1)
    sources: list[str] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=lambda: [{}])  # per input index
    chain: bool = True  # node i+1's parent is node i for every node: plain causal mask works
    main: int = 0  # nodes 1..main are the likeliest branch, contiguous from the root
    expected_main: float = 0.0  # how many of them the walk is expected to accept

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def chain_of(cls, tokens: Sequence[int], source: str = "draft") -> DraftTree:
        """A single branch: node i+1 (token i) is the child of node i."""
        n = len(tokens)
        return cls(
            tokens=list(tokens),
            parents=list(range(n)),
            depths=list(range(1, n + 1)),
            sources=[source] * n,
            children=[{token: i + 1} for i, token in enumerate(tokens)] + [{}],
            main=n,
        )


class Drafter:
    """A draft source that may learn from what the model said after its candidates."""

    def feedback(self, truth: Sequence[int]) -> None:
        """The model's actual next tokens after the last candidates (the accepted ones, then
        its own next token). Sources that keep no counts ignore it."""


class HiddenStateDrafter(Drafter, ABC):
    """Drafts from the model's last hidden state (the prediction heads, heads.py)."""

    @abstractmethod
    def candidates(self, hidden: torch.Tensor, limit: int) -> list[DraftCandidate]:
        """Candidates of up to `limit` tokens after the position of `hidden` [H]."""


class AcceptanceStats:
    """Online per-token acceptance rate per (source, match length), starting from PRIORS."""

    def __init__(self) -> None:
        self.accepted: dict[tuple[str, int], float] = {}
        self.proposed: dict[tuple[str, int], float] = {}

    def rate(self, bucket: tuple[str, int]) -> float:
        prior = PRIORS.get(bucket, 0.3)
        acc = self.accepted.get(bucket, 0.0) + prior * PRIOR_WEIGHT
        return acc / (self.proposed.get(bucket, 0.0) + PRIOR_WEIGHT)

    def update(
        self, candidates: Iterable[DraftCandidate], truth: Sequence[int], known: int
    ) -> None:
        """truth: accepted tokens (+ the model's next token when known); known: how many of
        truth's tokens are certain beyond which nothing was verified."""
        for cand in candidates:
            if cand.bucket is None:
                continue
            matched = 0
            for a, b in zip(cand.tokens, truth, strict=False):
                if a != b:
                    break
                matched += 1
            proposed = min(len(cand.tokens), matched + 1, known)
            if proposed <= 0:
                continue
            self.accepted[cand.bucket] = self.accepted.get(cand.bucket, 0.0) + min(
                matched, proposed
            )
            self.proposed[cand.bucket] = self.proposed.get(cand.bucket, 0.0) + proposed


class TokenIndex:
    """Most recent position following every 1..MAX_NGRAM-gram of a growing token list."""

    def __init__(self, tokens: Sequence[int] = (), max_n: int = MAX_NGRAM) -> None:
        self.max_n = max_n
        self.tokens: list[int] = []
        self.index: dict[object, int] = {}
        # The latest earlier position whose next token differs: a second guess for the tree.
        self.other: dict[object, int] = {}
        self.extend(tokens)

    def _register(self, key: object, p: int) -> None:
        old = self.index.get(key)
        if old is not None and self.tokens[old] != self.tokens[p]:
            self.other[key] = old
        self.index[key] = p

    def extend(self, new: Sequence[int]) -> None:
        toks = self.tokens
        start = len(toks)
        toks.extend(new)
        register = self._register
        # Register the n-grams ending just before each new position p, pointing at p.
        for p in range(max(start, 1), len(toks)):
            register(toks[p - 1], p)
            if p >= 2:
                register((toks[p - 2], toks[p - 1]), p)
                if p >= 3 and self.max_n >= 3:
                    register((toks[p - 3], toks[p - 2], toks[p - 1]), p)

    def lookup(self, tail: Sequence[int], limit: int) -> list[tuple[int, list[int]]]:
        """(match length, continuation) for each distinct match of the tail's last n-grams;
        a second, older match with another next token comes as match length n + OTHER."""
        found: list[tuple[int, list[int]]] = []
        seen: set[int] = set()
        for n in range(min(self.max_n, len(tail)), 0, -1):
            key: object = tail[-1] if n == 1 else tuple(tail[-n:])
            for p, length in ((self.index.get(key), n), (self.other.get(key), n + OTHER)):
                if p is None or p in seen:
                    continue
                seen.add(p)
                cont = self.tokens[p : p + limit]
                period = len(self.tokens) - p
                if cont and len(cont) < limit and len(cont) == period:
                    # The match runs to the end: a repetition, so keep repeating it.
                    cont = [cont[i % period] for i in range(limit)]
                if cont:
                    found.append((length, cont))
        return found


def ngram_candidates(
    source: str,
    index: TokenIndex,
    tail: Sequence[int],
    limit: int,
    stats: AcceptanceStats,
) -> list[DraftCandidate]:
    out = []
    for n, cont in index.lookup(tail, limit):
        bucket = (source, n)
        rate = stats.rate(bucket)
        probs = []
        p = 1.0
        for _ in cont:
            p *= rate
            if p < MIN_PROBABILITY:
                break
            probs.append(p)
        if probs:
            out.append(
                DraftCandidate(tokens=cont[: len(probs)], probs=probs, source=source, bucket=bucket)
            )
    return out


class CostModel:
    """Measured cost (ms) of one forward over q new tokens on top of a KV cache."""

    def __init__(self, costs: dict[int, float] | None = None) -> None:
        # Default (nothing timed), in units of a one-token pass: roughly the shape measured on
        # a 2-core AMD EPYC, where a 14M-parameter Llama on a 1,024-token cache took 1.6x one
        # pass for 8 tokens, 2.1x for 16 and 2.7x for 32, and a 0.5B-shaped one ~3.5x for 64.
        self.costs = dict(costs or {1: 1.0, 2: 1.2, 4: 1.3, 8: 1.5, 16: 2.0, 32: 2.7, 64: 4.5})
        self._points = sorted(self.costs.items())

    def cost(self, q: int) -> float:
        points = self._points
        if q <= points[0][0]:
            return points[0][1]
        for (q0, c0), (q1, c1) in itertools.pairwise(points):
            if q <= q1:
                return c0 + (c1 - c0) * (q - q0) / (q1 - q0)
        (q0, c0), (q1, c1) = points[-2], points[-1]
        return c1 + (c1 - c0) * (q - q1) / (q1 - q0)

    @classmethod
    def calibrate(
        cls,
        run: Callable[[int], None],
        sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
        repeats: int = 3,
        cancelled: Callable[[], bool] | None = None,
    ) -> CostModel:
        """run(q) does one forward over q tokens (and rolls the cache back); keeps the min. A
        slow model gets fewer turns than `repeats` (timing.affordable_turns), never none.
        Raises timing.TimingCancelled when `cancelled()` turns true between passes."""
        costs = {q: float("inf") for q in sizes}
        started = time.perf_counter()
        run(1)  # warm-up
        first = time.perf_counter() - started
        turns = max(1, affordable_turns(first, len(sizes), repeats))
        # Sizes interleaved, minimum kept: a busy CPU slows some passes, never speeds one up.
        for _ in range(turns):
            for q in sizes:
                check(cancelled)
                started = time.perf_counter()
                run(q)
                costs[q] = min(costs[q], (time.perf_counter() - started) * 1000)
        # Noise can make a larger pass look cheaper: keep the curve non-decreasing.
        running = 0.0
        for q in sorted(costs):
            running = max(running, costs[q])
            costs[q] = running
        return cls(costs)


class _Node:
    __slots__ = ("depth", "kids", "prob", "source", "token")

    def __init__(self, token: int, prob: float, source: str, depth: int) -> None:
        self.token = token
        self.prob = prob
        self.source = source
        self.depth = depth
        self.kids: dict[int, _Node] = {}


def build_tree(
    candidates: Sequence[DraftCandidate], cost: CostModel, max_nodes: int, max_depth: int
) -> DraftTree:
    """Merge candidates into a trie and keep the nodes whose expected saving beats their cost."""
    root = _Node(-1, 1.0, "", 0)
    nodes: list[_Node] = []
    for cand in candidates:
        node = root
        for depth, (token, prob) in enumerate(zip(cand.tokens, cand.probs, strict=False), 1):
            if depth > max_depth:
                break
            prob = min(prob, node.prob)  # a child is never likelier than its parent
            kid = node.kids.get(token)
            if kid is None:
                kid = _Node(token, prob, cand.source, depth)
                node.kids[token] = kid
                nodes.append(kid)
            elif prob > kid.prob:
                kid.prob = prob
                kid.source = cand.source
            node = kid
    if not nodes:
        return DraftTree()
    # Parents always precede children in this order (prob never increases with depth).
    nodes.sort(key=lambda n: (-n.prob, n.depth))
    # Expected tokens per millisecond: (1 bonus token + sum of kept probabilities) / pass cost.
    # Scanned over every size, since the cost curve is step-shaped (2 tokens can cost 1.6x of 1
    # while 8 cost hardly more than 2), so a marginal rule would stop too early.
    best_count, best_rate, expected = 0, 1.0 / cost.cost(1), 1.0
    for count, node in enumerate(nodes[:max_nodes], 1):
        expected += node.prob
        rate = expected / cost.cost(count + 1)
        if rate > best_rate:
            best_count, best_rate = count, rate
    keep = {id(node) for node in nodes[:best_count]}
    tree = DraftTree()
    # Depth-first, likeliest child first: the likeliest path is contiguous (cheap cache rollback).
    stack = [(kid, 0) for kid in sorted(root.kids.values(), key=lambda n: n.prob)]
    while stack:
        node, parent = stack.pop()
        if id(node) not in keep:
            continue
        tree.tokens.append(node.token)
        tree.parents.append(parent)
        tree.depths.append(node.depth)
        tree.sources.append(node.source)
        tree.children.append({})
        index = len(tree.tokens)
        tree.children[parent][node.token] = index
        if parent != index - 1:
            tree.chain = False
        elif tree.main == index - 1:
            tree.main = index
            tree.expected_main += node.prob
        stack.extend((kid, index) for kid in sorted(node.kids.values(), key=lambda n: n.prob))
    return tree
