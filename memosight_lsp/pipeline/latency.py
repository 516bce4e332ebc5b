"""What a keystroke can afford: the prompt size, the suffix, the prefill chunks, from the loaded
model's measured prefill rate and `completion.firstResponseMs` (F).

Every request answers by F (the first-response deadline, local_backend.py). A cold prompt (a
file just opened, a cursor that jumped, a stable head packed again) has to be prefilled before
anything is verified, so its size follows the rate: `rate x COLD_RESPONSES x F` tokens, at least
MIN_PROMPT_TOKENS, at most the context budget less HEADROOM (room to type into before the stable
head is packed again; stable_prompt.py lets a prompt grow to the whole budget). A slow model gets
a smaller, better-ranked prompt; a fast one the whole budget. Figures (prefill rates, what a
smaller prompt costs in exact match): docs/latency.md, "Figures behind the completion code".

In prefix-suffix-middle order everything after the cursor is prefilled again at every keystroke,
so the suffix gets at most `rate x SUFFIX_SHARE x F` tokens there; suffix-first order keeps it
in front and does not bound it. Prefill runs in chunks of about `rate x CHUNK_SHARE x F` tokens,
so a keystroke during a long prefill waits for one chunk at most.

A server's first sample comes from the calibration kept for this machine and model at load, or
else from its first prefill (pipeline/calibration.py: nothing is timed before the first
answer). A process's first prompt is MIN_PROMPT_TOKENS whatever the model's speed (`cautious`:
a whole budget on an unknown, slow model can take longer than a person waits, and a first pass
also pays the process's first-call costs at the end of its start, when the person has already
waited for the imports and the load). The rate then
follows every prefill of at least MIN_SAMPLE_TOKENS as a moving average; the sizes move only
when it moves by more than SETTLE_RATIO (a prompt that changes size is prefilled again from its
first token). Engines that never measured a rate (one-shot CLI and benchmark engines) pack the
whole budget.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

COLD_RESPONSES = 3  # a cold prompt is prefilled within this many first responses
MIN_PROMPT_TOKENS = 256  # below this a prompt loses more than it saves
HEADROOM = 1 / 8  # of the budget, left to type into before the stable head is packed again
SUFFIX_SHARE = 0.2  # of a first response, for prefilling the suffix again after a keystroke
MIN_SUFFIX_TOKENS, MAX_SUFFIX_TOKENS = 16, 128
CHUNK_SHARE = 0.5  # of a first response, for one prefill chunk
MIN_CHUNK_TOKENS = 64  # smaller passes cost more per token than they save in waiting
QUANTUM = 32  # sizes in steps of this many tokens
MIN_SAMPLE_TOKENS = 48  # shorter prefills are mostly per-pass overhead, not a rate
SMOOTHING = 0.3  # weight of a new sample in the moving average
SETTLE_RATIO = 1.25  # the settled rate follows the average once they differ by this factor


class PrefillRate:
    """Prompt tokens per second of the loaded model: a moving average of measured prefills and
    the settled value the sizes are computed from. Thread-safe (the worker writes, stats read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.average: float | None = None
        self.settled: float | None = None
        self.samples = 0

    def observe(self, tokens: int, ms: float) -> None:
        """One prefill of `tokens` prompt tokens that took `ms`."""
        if tokens < MIN_SAMPLE_TOKENS or ms <= 0:
            return
        rate = tokens / (ms / 1000)
        with self._lock:
            self.samples += 1
            if self.average is None:
                self.average = rate
            else:
                self.average += SMOOTHING * (rate - self.average)
            if self.settled is None or not (
                1 / SETTLE_RATIO <= self.average / self.settled <= SETTLE_RATIO
            ):
                self.settled = self.average

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "tokensPerS": round(self.settled, 1) if self.settled else None,
                "averageTokensPerS": round(self.average, 1) if self.average else None,
                "samples": self.samples,
            }


@dataclass(frozen=True, kw_only=True)
class LatencyBudget:
    """The sizes one request packs and prefills with (tokens)."""

    prompt_tokens: int  # a cold prompt: ranked context, the code around the cursor
    max_prompt_tokens: int  # a prompt on a stable head grows to this before it is packed again
    suffix_tokens: int | None  # at most this much code after the cursor (None: its share)
    prefill_chunk: int  # tokens per prefill pass (0: the whole prompt in one)
    rate: float | None  # the settled prefill rate it was computed from

    def describe(self) -> dict[str, Any]:
        return {
            "promptTokens": self.prompt_tokens,
            "maxPromptTokens": self.max_prompt_tokens,
            "suffixTokens": self.suffix_tokens,
            "prefillChunk": self.prefill_chunk,
            "prefillTokensPerS": round(self.rate, 1) if self.rate else None,
        }


def _steps(tokens: float, quantum: int = QUANTUM) -> int:
    return int(tokens // quantum) * quantum


def latency_budget(
    budget_tokens: int,
    rate: float | None,
    first_response_ms: int,
    *,
    suffix_first: bool,
    cautious: bool = False,
) -> LatencyBudget:
    """The sizes for a context budget of `budget_tokens` (already within the model's positions),
    a settled prefill `rate` (tokens/s, None: not measured) and the first-response deadline
    (0: none). Without a rate or a deadline: the whole budget, unbounded suffix, one pass; but
    `cautious` (a server process's first prompt) with a deadline: MIN_PROMPT_TOKENS, whatever
    the model's speed or the rate kept."""
    if cautious and first_response_ms > 0:
        small = min(budget_tokens, MIN_PROMPT_TOKENS)
        suffix = None if suffix_first else MIN_SUFFIX_TOKENS
        return LatencyBudget(
            prompt_tokens=small,
            max_prompt_tokens=small,
            suffix_tokens=suffix,
            prefill_chunk=MIN_CHUNK_TOKENS,  # a newer request need not wait for all of it
            rate=rate,
        )
    if rate is None or first_response_ms <= 0 or budget_tokens <= MIN_PROMPT_TOKENS:
        return LatencyBudget(
            prompt_tokens=budget_tokens,
            max_prompt_tokens=budget_tokens,
            suffix_tokens=None,
            prefill_chunk=0,
            rate=rate,
        )
    per_response = rate * first_response_ms / 1000  # tokens prefilled in one first response
    roomy = budget_tokens - int(budget_tokens * HEADROOM)
    cold = max(MIN_PROMPT_TOKENS, min(roomy, _steps(per_response * COLD_RESPONSES)))
    suffix = None
    if not suffix_first:
        suffix = _steps(per_response * SUFFIX_SHARE, 8)
        suffix = max(MIN_SUFFIX_TOKENS, min(MAX_SUFFIX_TOKENS, suffix))
    chunk = max(MIN_CHUNK_TOKENS, _steps(per_response * CHUNK_SHARE))
    return LatencyBudget(
        prompt_tokens=cold,
        max_prompt_tokens=budget_tokens,
        suffix_tokens=suffix,
        prefill_chunk=chunk if chunk < budget_tokens else 0,
        rate=rate,
    )
