"""Draft tokens for speculative decoding, merged into one candidate tree sized by a cost model.

A draft source (DraftSource) proposes candidate continuations of the committed tokens; the
decoder holds a list of them (speculative.default_sources lists the built-in ones). Every
candidate token carries the source's estimate of its acceptance probability, from the source's
own priors and online counts. The tree keeps the likeliest nodes, as many as maximise expected
tokens per millisecond, with the cost of a pass over q tokens measured on the device
(CostModel.calibrate). When no draft is likely enough, the pass is a plain one-token step:
drafting turns itself off where it does not pay.
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .timing import affordable_turns, check

if TYPE_CHECKING:
    import torch

MAX_NGRAM = 3
# A lookup's second guess (an older match whose next token differs) counts its acceptance apart:
# its match key is the match length + OTHER (TokenIndex.lookup).
OTHER = 10
DEFAULT_PRIOR = 0.3  # acceptance rate before any counts of a key without a prior of its own
PRIOR_WEIGHT = 8.0  # pseudo-counts behind each prior
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


@dataclass(kw_only=True)
class DraftState:
    """One decoder call as draft sources see it; the decoder updates it after every pass."""

    committed: list[int]  # the prompt, then each accepted token: the cache holds all but the last
    prompt_len: int
    hidden: torch.Tensor | None = None  # [H] last hidden state, whose logits chose committed[-1]
    workspace: TokenIndex | None = None  # other workspace text (Decoder.set_workspace_tokens)
    kept: Mapping[str, Any] = field(default_factory=dict)  # per source: keep() of the last call


class DraftSource(ABC):
    """One source of draft tokens; SpeculativeDecoder holds a list of them.

    Each pass the decoder asks every source fitted to the model for candidates after
    state.committed, at most `room` tokens deep, merges them into one tree (build_tree) and
    verifies it, then tells each source it asked what the model said (feedback). A source gives
    each token its own estimate of the chance it is accepted (its priors, then its own counts):
    the estimates only shape the tree, verification decides, so any source keeps the output
    identical to greedy decoding. A decoder runs one call at a time, so a source may keep the
    state of the current call on itself.
    """

    name: ClassVar[str]  # its key in the decoder's acceptedBySource
    # True: candidates() costs enough to time; the decoder then skips the source while the
    # tokens it gets accepted save less time than it takes (probing again now and then).
    metered: ClassVar[bool] = False
    # False: it drafts from earlier calls or other buffers, which a one-off call lacks.
    drafts_alone: ClassVar[bool] = True

    def fit(self, model: Any) -> bool:
        """Get ready to draft for `model` (load what was saved for it), when the decoder meets
        it; False: nothing to draft with for this model, the decoder leaves the source out."""
        return True

    def start(self, state: DraftState) -> None:
        """A call begins; state.committed is the prompt. Nothing by default."""
        return

    @abstractmethod
    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        """Continuations of state.committed, at most `room` tokens each, with the cumulative
        probability that each prefix is accepted."""

    def feedback(self, truth: Sequence[int]) -> None:
        """The model's tokens after the last candidates (the accepted ones, then its own next
        token when generation went on). Nothing by default."""
        return

    def keep(self, state: DraftState) -> Any:
        """What to keep with the buffer's cache when the call ends: state.kept[name] of the
        buffer's next call. None by default."""
        return None


class LookupSource(DraftSource):
    """N-gram lookup in a TokenIndex: the continuations after the latest match of the last
    1..MAX_NGRAM committed tokens, and after an older match that went on differently. Each
    token's acceptance rate comes from counts per match key, starting from `priors`."""

    priors: ClassVar[Mapping[int, float]]  # per match length; second guesses: DEFAULT_PRIOR

    def __init__(self) -> None:
        self.stats = AcceptanceStats({(self.name, n): p for n, p in self.priors.items()})
        self._last: list[DraftCandidate] = []

    @abstractmethod
    def index(self, state: DraftState) -> TokenIndex | None:
        """The tokens to look the committed tail up in."""

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        index = self.index(state)
        tail = state.committed[-MAX_NGRAM:]
        found = [] if index is None else ngram_candidates(self.name, index, tail, room, self.stats)
        self._last = found
        return found

    def feedback(self, truth: Sequence[int]) -> None:
        self.stats.update(self._last, truth, len(truth))
        self._last = []


class PromptLookup(LookupSource):
    """The prompt and the tokens generated so far: code repeats itself."""

    name = "prompt"
    priors: ClassVar[Mapping[int, float]] = {3: 0.6, 2: 0.45, 1: 0.25}

    def __init__(self) -> None:
        super().__init__()
        self._index = TokenIndex()

    def start(self, state: DraftState) -> None:
        self._index = TokenIndex(state.committed)

    def index(self, state: DraftState) -> TokenIndex:
        self._index.extend(state.committed[len(self._index.tokens) :])
        return self._index


class PreviousSuggestion(LookupSource):
    """The buffer's last suggestion, with a little of the prompt before it (to find where it
    went): the user often types it through."""

    name = "previous"
    priors: ClassVar[Mapping[int, float]] = {3: 0.8, 2: 0.7, 1: 0.5}
    drafts_alone = False
    CONTEXT = 24  # prompt tokens kept before the suggestion

    def __init__(self) -> None:
        super().__init__()
        self._index: TokenIndex | None = None

    def start(self, state: DraftState) -> None:
        self._index = state.kept.get(self.name)

    def index(self, state: DraftState) -> TokenIndex | None:
        return self._index

    def keep(self, state: DraftState) -> TokenIndex | None:
        """The suggestion just made; a call that suggested nothing keeps the one before it."""
        if len(state.committed) <= state.prompt_len:
            return self._index
        return TokenIndex(state.committed[max(0, state.prompt_len - self.CONTEXT) :])


class WorkspaceLookup(LookupSource):
    """Other text of the workspace, given to the decoder as token ids."""

    name = "workspace"
    priors: ClassVar[Mapping[int, float]] = {3: 0.5, 2: 0.35, 1: 0.15}
    drafts_alone = False

    def index(self, state: DraftState) -> TokenIndex | None:
        return state.workspace


class AcceptanceStats:
    """Online per-token acceptance rate per (source, match key), starting from `priors`
    (DEFAULT_PRIOR for a key without one)."""

    def __init__(self, priors: Mapping[tuple[str, int], float] | None = None) -> None:
        self.priors = dict(priors or {})
        self.accepted: dict[tuple[str, int], float] = {}
        self.proposed: dict[tuple[str, int], float] = {}

    def rate(self, bucket: tuple[str, int]) -> float:
        prior = self.priors.get(bucket, DEFAULT_PRIOR)
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
        # Default (nothing timed), in units of a one-token pass: roughly the shape measured for
        # small models on a CPU, where a pass over more tokens costs far less than as many
        # one-token passes (figures: docs/speculative.md).
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
    # Scanned over every size, since the cost curve is step-shaped (two tokens can cost much more
    # than one while eight cost hardly more than two), so a marginal rule would stop too early.
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
