"""What every decoder shares: stop rules, the Generation it fills, the greedy step, the walk that
accepts drafted tokens, and the Decoder base that runs a call.

A decoder is a Decoder with one method, generate(run). It takes a cache from the run (which
starts the clock), prefills the prompt through run.prefill (in chunks that poll for
cancellation, when the rules ask for chunks), then steps with run.take_next(logits) until that
gives None; drafting decoders verify a draft in one pass and keep what run.accept(tree, scores)
walks. The base builds the Generation, times prefill and
decode, and keeps the cache a per-buffer decoder hands to run.keep() for that buffer's next
call (PrefixCache); a cancelled prefill keeps what it has prefilled, and prefill_only fills a
buffer's cache without decoding (pre-warm). What LocalBackend calls on any decoder (warm_up,
set_workspace_tokens, prefill_only, forget, describe) is declared here, with defaults for
decoders that time, draft or keep nothing more.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import torch

from .drafters import DraftTree
from .fused_trunk import prepare_trunk
from .kv_cache import new_cache
from .prefix_cache import PrefixCache

if TYPE_CHECKING:
    from .kv_cache import Cache

# Tokens allowed next, given the tokens generated so far; None means any token.
AllowedTokens = Callable[[Sequence[int]], Sequence[int] | None]
T = TypeVar("T")


# The most prompt tokens one prefill pass takes: attention over a pass holds a score per row and
# key, so pieces bound a long prompt's peak memory, at no cost in time (docs/speculative.md).
MAX_PREFILL_ROWS = 512


@dataclass(kw_only=True)
class StopRules:
    max_new_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    # Called after each accepted token with all new tokens; True ends generation (stop strings).
    should_stop: Callable[[Sequence[int]], bool] | None = None
    # Polled between forward passes; True abandons the generation (superseded request).
    cancelled: Callable[[], bool] | None = None
    # Prompt tokens per prefill pass (0: up to MAX_PREFILL_ROWS in one): `cancelled` is polled
    # between the chunks, so a keystroke during a long prefill does not wait for all of it.
    prefill_chunk: int = 0
    # Called after every forward pass (prefill chunks too) with the new tokens so far: a caller
    # with a deadline answers from it while decoding goes on.
    progress: Callable[[Sequence[int]], None] | None = None
    # time.monotonic() past which decoding ends with what it has verified (stop reason "time",
    # polled where `cancelled` is): however slow the machine, nothing decodes for ever.
    stop_at: float | None = None
    # Record the log-probability of every chosen token (Generation.scores): how sure the model
    # was of what it wrote, to choose between readings of the cursor (pipeline/readings.py).
    score: bool = False

    def out_of_time(self) -> bool:
        return self.stop_at is not None and time.monotonic() > self.stop_at


@dataclass(frozen=True, kw_only=True)
class BranchRules:
    """What a call asks of the alternatives decoded after its greedy tokens
    (inference/branches.py)."""

    count: int  # alternatives wanted beside the greedy completion
    max_tokens: int  # most tokens of one alternative, its first included
    # time.monotonic() by which branching ends, asked once with the greedy tokens when it would
    # start (<= now: none, e.g. when the greedy text is trimmed to nothing).
    until: Callable[[Sequence[int]], float]


@dataclass(kw_only=True)
class Branch:
    """One alternative's new tokens (without a stop token)."""

    tokens: list[int]
    ended: bool = False  # by a stop token or the stop rule (else cut: by the token cap or time)


@dataclass(kw_only=True)
class Generation:
    tokens: list[int]  # new tokens, without the stop token
    prompt_tokens: int
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    forward_passes: int = 0
    stop_reason: str = "max_tokens"  # max_tokens | eos | stop | cancelled | time
    # Prompt tokens in the cache when a prefill was cancelled (kept for the buffer's next call).
    cancelled_at_prompt_tokens: int = 0
    stats: dict = field(default_factory=dict)  # accelerator details (accepted tokens per pass...)
    # Other likely beginnings, each continued greedily a few tokens (inference/branches.py); empty
    # unless the call asked for them and the model had close runner-ups.
    alternatives: list[Branch] = field(default_factory=list)
    # With StopRules.score: the log-probability of each chosen token, in order, a stop token's
    # included (the model's choice to end there).
    scores: list[float] = field(default_factory=list)

    def prefill_report(self) -> dict[str, Any]:
        """What a prefill-only run (a pre-warm) did: the prompt's tokens, those it found in the
        buffer's cache, those it prefilled. Stopped between chunks (cancelled, out of time),
        the chunks done stay in the cache and count."""
        stopped = self.stop_reason in ("cancelled", "time")
        in_cache = self.cancelled_at_prompt_tokens if stopped else self.prompt_tokens
        reused = self.stats.get("reusedPromptTokens", 0)
        return {
            "promptTokens": self.prompt_tokens,
            "reusedPromptTokens": reused,
            "prefilledTokens": max(0, in_cache - reused),
            "prefillMs": round(self.prefill_ms, 2),
            "cancelled": stopped,
        }


def pick(logits: torch.Tensor, allowed: Sequence[int] | None) -> int:
    """argmax over the vocabulary [V], or over the allowed ids only."""
    if allowed is None:
        return int(torch.argmax(logits))
    index = torch.as_tensor(list(allowed), dtype=torch.long, device=logits.device)
    return int(index[torch.argmax(logits[index])])


def log_probability(logits: torch.Tensor, token: int) -> float:
    """log p(token) under logits [V], over the whole vocabulary."""
    return float(torch.log_softmax(logits.float(), dim=-1)[token])


def record_token(token: int, new_tokens: list[int], rules: StopRules) -> str | None:
    """Appends `token` to new_tokens unless it is a stop token; returns why generation ends
    with it, if it does."""
    if token in rules.stop_token_ids:
        return "eos"
    new_tokens.append(token)
    if rules.should_stop is not None and rules.should_stop(new_tokens):
        return "stop"
    if len(new_tokens) >= rules.max_new_tokens:
        return "max_tokens"
    return None


def take_next(
    logits: torch.Tensor,
    result: Generation,
    rules: StopRules,
    allowed_tokens: AllowedTokens | None,
) -> int | None:
    """The greedy next token from logits [V], recorded in result; None once generation ends
    (result.stop_reason then says why). Every decoder steps through this, so all stop alike."""
    allowed = allowed_tokens(result.tokens) if allowed_tokens else None
    token = pick(logits, allowed)
    if rules.score:
        result.scores.append(log_probability(logits, token))
    reason = record_token(token, result.tokens, rules)
    if reason is None and rules.cancelled is not None and rules.cancelled():
        reason = "cancelled"
    if reason is None and rules.out_of_time():
        reason = "time"
    if reason is not None:
        result.stop_reason = reason
        return None
    return token


class PassScores(Protocol):
    """The logits of one verification pass, row i predicting the token after input i."""

    def at(self, i: int) -> torch.Tensor:
        """Logits [V] of row i."""
        ...

    def choice(self, i: int) -> int:
        """The argmax of row i."""
        ...


class RowScores:
    """PassScores of a pass whose logits [1+k, V] are all computed."""

    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def at(self, i: int) -> torch.Tensor:
        return self.rows[i]

    def choice(self, i: int) -> int:
        return int(torch.argmax(self.rows[i]))


class Run:
    """One call of a decoder: its inputs, the Generation it fills and the clock."""

    def __init__(
        self,
        model: Any,
        prompt_ids: Sequence[int],
        rules: StopRules,
        allowed_tokens: AllowedTokens | None,
        buffer_id: str | None,
        prefix_cache: PrefixCache,
        branches: BranchRules | None = None,
    ) -> None:
        self.model = model
        self.prompt_ids = prompt_ids
        self.rules = rules
        self.allowed_tokens = allowed_tokens
        self.buffer_id = buffer_id  # the per-buffer state key, None for a one-off call
        self.branches = branches  # alternatives asked for (None: none)
        self.result = Generation(tokens=[], prompt_tokens=len(prompt_ids))
        self._prefix_cache = prefix_cache
        self._started = self._prefilled = self._decoded = 0.0
        self._kept: tuple[list[int], Cache, Any] | None = None
        self.attached: Any = None  # what the buffer's cache came with (kept again if cancelled)
        self._reuses = False  # the cache came from take_cache (a decoder that reuses caches)

    def attachment(self) -> Any:
        """What this decoder attached to the buffer's cache on its last call (see keep)."""
        return self._prefix_cache.attachment(self.buffer_id, self.model)

    def take_cache(self) -> tuple[Cache, int]:
        """Starts the clock. The buffer's cache from its last call and how many prompt tokens it
        holds already (at most all but the last); an empty cache and 0 without one."""
        self._started = time.perf_counter()
        self.attached = self.attachment()
        self._reuses = True
        return self._prefix_cache.take(self.buffer_id, self.model, self.prompt_ids)

    def new_cache(self) -> Cache:
        """Starts the clock. An empty cache, for decoders that reuse nothing."""
        self._started = time.perf_counter()
        return new_cache(self.model)

    def prefilled(self) -> None:
        """The prompt is in the cache after one forward pass: decoding starts."""
        self._prefilled = time.perf_counter()
        self.result.forward_passes = 1
        self.result.prefill_ms = (self._prefilled - self._started) * 1000

    def prefill(self, step: Callable[[Sequence[int]], T], cache: Cache, done: int) -> T | None:
        """Feeds prompt_ids[done:] (the cache holds the rest) to `step`, one forward pass over
        the ids it is given on top of `cache`, in chunks of rules.prefill_chunk; returns the
        last pass's output and marks the run prefilled. Between chunks it reports progress and
        polls `cancelled`: cancelled, it keeps the cache of the prompt prefilled so far for the
        buffer's next call (when it came from take_cache: the work is not lost), records why and
        returns None."""
        ids = self.prompt_ids
        chunk = self.rules.prefill_chunk if self.rules.prefill_chunk > 0 else MAX_PREFILL_ROWS
        chunk = min(chunk, MAX_PREFILL_ROWS)
        while True:
            end = len(ids) if len(ids) - done < chunk + chunk // 4 else done + chunk
            out = step(ids[done:end])
            done = end
            if done >= len(ids):
                break
            self._report()
            cancelled = self.rules.cancelled is not None and self.rules.cancelled()
            if cancelled or self.rules.out_of_time():
                self.result.stop_reason = "cancelled" if cancelled else "time"
                self.result.cancelled_at_prompt_tokens = done
                self.result.prefill_ms = (time.perf_counter() - self._started) * 1000
                if self._reuses:
                    self.keep(list(ids[:done]), cache, self.attached)
                return None
        self.prefilled()
        return out

    def take_next(self, logits: torch.Tensor) -> int | None:
        """The greedy next token from logits [V] (see take_next); None once generation ends."""
        token = take_next(logits, self.result, self.rules, self.allowed_tokens)
        if token is not None:
            self._report()
        return token

    def _report(self) -> None:
        if self.rules.progress is not None:
            self.rules.progress(self.result.tokens)

    def accept(self, tree: DraftTree, scores: PassScores) -> tuple[list[int], bool]:
        """Walks down the drafted tree while the model's own choice (under allowed_tokens) is a
        drafted child, recording each accepted token like take_next. Returns the path of node
        indices (0: the root, the last committed token) and whether an accepted token ended
        generation (result.stop_reason then says why)."""
        tokens, rules, allowed_tokens = self.result.tokens, self.rules, self.allowed_tokens
        children = tree.children
        node = 0
        path = [0]
        reason: str | None = None
        while reason is None:
            kids = children[node]
            if not kids:
                break
            allowed = allowed_tokens(tokens) if allowed_tokens else None
            choice = pick(scores.at(node), allowed) if allowed else scores.choice(node)
            kid = kids.get(choice)
            if kid is None:
                break
            if rules.score:
                self.result.scores.append(log_probability(scores.at(node), choice))
            reason = record_token(choice, tokens, rules)
            node = kid
            path.append(kid)
        if reason is not None:
            self.result.stop_reason = reason
        return path, reason is not None

    def keep(self, tokens: list[int], cache: Cache, attachment: Any = None) -> None:
        """Keep `cache`, holding exactly `tokens`, and what else the decoder wants back
        (`attachment`), for the buffer's next call."""
        self._kept = (tokens, cache, attachment)

    def decoded(self) -> None:
        """The greedy tokens are final: what follows (alternatives) is off the decode's clock."""
        self._decoded = time.perf_counter()

    def step_seconds(self) -> float:
        """The mean time of one decoding pass so far (0 before the first): what a pass of a
        few more rows (alternatives, inference/branches.py) is expected to take."""
        steps = self.result.forward_passes - 1  # the first pass is the prompt's prefill
        if not self._prefilled or steps < 1:
            return 0.0
        return ((self._decoded or time.perf_counter()) - self._prefilled) / steps

    def finish(self) -> None:
        """Decoding is over: time it, then keep the buffer's cache (outside the timing)."""
        if self._prefilled:
            ended = self._decoded or time.perf_counter()
            self.result.decode_ms = (ended - self._prefilled) * 1000
        if self._kept is not None:
            self._prefix_cache.put(self.buffer_id, self.model, *self._kept)


class Decoder(ABC):
    """A decoding method, called as decoder(model, prompt_ids, rules, allowed_tokens=...,
    buffer_id=...) -> Generation. Subclasses write generate(run) (see the module doc)."""

    # Whether LocalBackend should hand it the other open buffers' tokens (costs an encode).
    drafts_from_workspace: ClassVar[bool] = False
    # Whether generate() starts from the buffer's kept cache (run.take_cache), so a prefill
    # done ahead of time (prefill_only) is reused.
    reuses_cache: ClassVar[bool] = False

    def __init__(self, *, prefix_cache: PrefixCache | None = None) -> None:
        # Per-buffer KV caches, for decoders that take_cache() and keep() them.
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()

    def __call__(
        self,
        model: Any,
        prompt_ids: Sequence[int],
        rules: StopRules,
        *,
        allowed_tokens: AllowedTokens | None = None,
        buffer_id: str | None = None,
        branches: BranchRules | None = None,
    ) -> Generation:
        """`branches`: alternatives to decode after the greedy tokens, by decoders that can
        (greedy and speculative: inference/branches.py); others return none."""
        run = Run(model, prompt_ids, rules, allowed_tokens, buffer_id, self.prefix_cache, branches)
        if rules.max_new_tokens > 0 and prompt_ids:
            self.generate(run)
            run.finish()
        return run.result

    @abstractmethod
    def generate(self, run: Run) -> None:
        """Decode run.prompt_ids into run.result: take a cache from the run, prefill, call
        run.prefilled(), then step with run.take_next() (and run.accept()) until it ends."""

    def prefill_only(
        self, model: Any, prompt_ids: Sequence[int], rules: StopRules, *, buffer_id: str
    ) -> Generation:
        """Prefill the prompt into the buffer's kept cache and decode nothing (pre-warm), in
        rules.prefill_chunk chunks, stopping early when `cancelled`: the buffer's next call
        reuses whatever was prefilled. Only for decoders that reuse_cache for this model;
        others keep nothing and return at once. Bounded like every kept cache (PrefixCache)."""
        run = Run(model, prompt_ids, rules, None, buffer_id, self.prefix_cache)
        if not prompt_ids or not self.reuses_cache_of(model):
            return run.result
        trunk = prepare_trunk(model)
        device = next(model.parameters()).device
        cache, reused = run.take_cache()
        run.result.stats = {"reusedPromptTokens": reused}

        def step(ids: Sequence[int]) -> bool:
            with torch.inference_mode():
                trunk(torch.tensor([list(ids)], device=device), cache, prefill=True)  # [S, H]
            return True

        if run.prefill(step, cache, reused):  # None: cancelled, the part done is kept
            run.keep(list(prompt_ids), cache, run.attached)
        run.finish()
        return run.result

    def reuses_cache_of(self, model: Any) -> bool:
        """Whether generate() reuses the buffer's kept cache for this model (reuses_cache, and
        the model suits the decoder)."""
        return self.reuses_cache

    def warm_up(self, model: Any, prompt_tokens: int) -> None:
        """Do now what the first call for prompts of about `prompt_tokens` would time on the
        machine, so that no completion waits for it. Nothing, unless a decoder times something."""
        return

    def set_workspace_tokens(self, documents: Sequence[Sequence[int]]) -> None:
        """Other workspace text (token ids) to draft from, for decoders that
        drafts_from_workspace; replaces the previous set."""
        return

    def forget(self, buffer_id: str) -> None:
        """Drop what is kept for a closed buffer."""
        self.prefix_cache.forget(buffer_id)

    def describe(self) -> dict[str, Any]:
        return {"prefixCache": self.prefix_cache.stats()}


def time_prefill(model: Any, tokens: int) -> tuple[int, float]:
    """(tokens, ms) of one prefill of `tokens` random ids (fewer where the model has fewer
    positions) on an empty cache through the decoders' trunk, after an untimed short one: the
    first sample of the model's prefill rate."""
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 0) or tokens + 1
    tokens = max(1, min(tokens, limit - 1))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, int(model.config.vocab_size), (1, tokens), generator=generator)
    ids = ids.to(next(model.parameters()).device)
    trunk = prepare_trunk(model)
    with torch.inference_mode():
        trunk(ids[:, : min(16, tokens)], new_cache(model), prefill=True)
        started = time.perf_counter()
        trunk(ids, new_cache(model), prefill=True)  # [S, H]
    return tokens, (time.perf_counter() - started) * 1000
