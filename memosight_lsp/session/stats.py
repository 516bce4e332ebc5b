"""Counters and latency percentiles behind `memosight/stats`. Thread-safe (worker + event loop)."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, ClassVar

WINDOW = 2000  # latencies kept per series


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (q in percent): the smallest of the values with at
    least q% of them at or below it (of 10 values, p90 is the 9th); None for no values. The
    one definition of every report, the server's and the benchmarks'."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(round(q / 100 * len(ordered), 9))  # rounded: 0.07 * 100 is 7.000...01
    return round(ordered[min(len(ordered), max(1, rank)) - 1], 3)


class ServerStats:
    COUNTERS = (
        "requests",
        "modelCalls",
        "typeThroughHits",
        "precomputeCalls",
        "precomputeHits",
        "cancelled",
        "superseded",
        "dropped",
        "empty",
        "errors",
        "losslessDraftCalls",  # model calls decoded with settings.compression's KV modes
        "lossySnapkvCalls",
        "partialAnswers",  # answered by the first-response deadline, decoding went on
        # Of those, the ones whose whole suggestion was pushed to the client when decoding ended
        # (memosight/completionUpdated).
        "longerPushed",
        "abandoned",  # model jobs past completion.maxWaitMs and its grace (a stuck worker)
        "prewarms",  # prompts prefilled ahead of a request (pre-warm jobs run)
        "prewarmedTokens",
        # Prompt tokens the model's completions took from the buffer's kept KV cache (what a
        # pre-warm or the keystroke before prefilled) instead of prefilling them.
        "reusedPromptTokens",
        # A serving engine (model.backend): its failures, and the prompt tokens it reported
        # taking from its prefix cache vs computing (summed over the requests that said).
        "engineErrors",
        "engineTimeouts",
        "engineUnavailable",
        "engineCachedTokens",
        "enginePrefilledTokens",
        # memosight/nextEdit: requests, those answered by a rename's, a string constant's or a
        # removed parameter's follow-up (no model), and the model rewrites run for the rest.
        "nextEditRequests",
        "nextEditRenames",
        "nextEditStrings",
        "nextEditCallSites",
        "nextEditModelCalls",
        # Its pre-warm in the pause (session/next_edit_flow.py): jobs run, the prompt tokens they
        # prefilled; the prompt tokens the model's rewrites took from the buffer's kept cache,
        # and of those the ones a pre-warm prefilled.
        "nextEditPrewarms",
        "nextEditPrewarmedTokens",
        "nextEditReusedTokens",
        "nextEditReusedPrewarmedTokens",
        # The prompts' common head (the chat family's instructions) prefilled when the worker
        # was first idle with the model loaded: the tokens, once per model.
        "nextEditHeadTokens",
    )
    _ENGINE_FINISH: ClassVar[dict[str, str]] = {
        "error": "engineErrors",
        "deadline": "engineTimeouts",
        "unavailable": "engineUnavailable",
    }

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(self.COUNTERS, 0)
        self._latency: deque[float] = deque(maxlen=WINDOW)
        self._type_through: deque[float] = deque(maxlen=WINDOW)
        self._tokens: deque[int] = deque(maxlen=WINDOW)
        self.last_latency_ms: float | None = None

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def served(self, latency_ms: float, *, type_through: bool = False) -> None:
        with self._lock:
            self._latency.append(latency_ms)
            if type_through:
                self._type_through.append(latency_ms)
            self.last_latency_ms = round(latency_ms, 3)

    def engine(self, report: dict[str, Any]) -> None:
        """One serving-engine answer (Completion.stats["engine"])."""
        with self._lock:
            counter = self._ENGINE_FINISH.get(report.get("finish", ""))
            if counter is not None:
                self._counts[counter] += 1
            cached, prefilled = report.get("cachedTokens"), report.get("prefilledTokens")
            if isinstance(cached, int) and isinstance(prefilled, int):
                self._counts["engineCachedTokens"] += cached
                self._counts["enginePrefilledTokens"] += prefilled

    def tokens(self, n: int) -> None:
        with self._lock:
            self._tokens.append(n)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            latency = list(self._latency)
            type_through = list(self._type_through)
            tokens = list(self._tokens)
            out: dict[str, Any] = dict(self._counts)
        out.update(
            p50Ms=percentile(latency, 50),
            p95Ms=percentile(latency, 95),
            p99Ms=percentile(latency, 99),
            typeThroughP50Ms=percentile(type_through, 50),
            typeThroughP99Ms=percentile(type_through, 99),
            meanTokens=round(sum(tokens) / len(tokens), 2) if tokens else None,
            lastLatencyMs=self.last_latency_ms,
            prefixCacheHitRate=_ratio(
                out["engineCachedTokens"], out["engineCachedTokens"] + out["enginePrefilledTokens"]
            ),
        )
        return out


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
