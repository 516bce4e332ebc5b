"""One completion at a cursor, computed by a serving engine over HTTP (memosight_lsp.engines).

Everything but the generation stays ours and is the same code the in-process engine runs: the
cursor policy and the context packing (request.plan_of / pack_context, stable-first so the
engine's prefix cache hits on every keystroke), the FIM prompt in the model's format, token
healing (checked, not forced: see complete) and the post-processing. The stream is read only
until post-processing has a whole line or block, then closed. The worker's `cancelled()`
closes the HTTP stream of a superseded request (the engine stops generating for it).
Type-through, precompute and stats sit above, in the server, and do not know which engine ran.

Failures never hang: every request ends by the deadline (model.timeoutMs) with the text so far
or an empty answer and a reason. An engine that is down, answers an HTTP error, sends something
unreadable or cuts a stream is marked unavailable with one message (the host shows it as the
status) and is retried with backoff; until then requests are answered empty at once. The first
answer after that marks it ready again. Not thread-safe: the model worker calls it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memosight_lsp.engines import (
    Cancelled,
    Engine,
    EngineError,
    EngineInfo,
    EngineResult,
    GenerateRequest,
    PromptPieces,
)
from memosight_lsp.engines.base import DEFAULT_CHARS_PER_TOKEN
from memosight_lsp.engines.http import deadline_in, never

from . import postprocess
from .prompt import MARKER_RESERVE, Prompt, build_prompt
from .request import Completion, CompletionRequest, Deadline, pack_context, plan_of

log = logging.getLogger(__name__)

# Seconds before the next try after 1, 2, 3, ... failures in a row.
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0)
# Token counts are estimated (characters / the engine's measured ratio): keep this much of the
# engine's context free of the estimate's error.
CONTEXT_HEADROOM = 0.85
# HTTP statuses that are about one request, not the engine: no backoff for them.
REQUEST_STATUSES = (400, 413, 422)
# Completion.stop_reason of an answer that is not the model's (the server must not remember
# such a state as "nothing to suggest here").
ENGINE_FAILURES = ("unavailable", "error", "deadline")
_FAILURE_WORDS = {
    "unavailable": "engine unavailable",
    "error": "engine error",
    "deadline": "engine too slow",
}

EMPTY = "the model suggested nothing useful here (empty after trimming)"
NOT_THE_WORD = "the model did not continue the word at the cursor"

HealthListener = Callable[[bool, str], None]  # (up, message); called on the worker thread

# Characters per token where the engine has no tokenizer endpoint, for bounding a raw
# completion's length: fewer than code usually has per token, so the bound is not too short.
RAW_CHARS_PER_TOKEN = 3.0


@dataclass
class RawCompletion:
    """A raw completion of a prompt text (next edits): the engine's result, or why there is
    none and what stopped it ("unavailable", "error", "deadline", "cancelled")."""

    result: EngineResult | None = None
    reason: str | None = None
    stop_reason: str = ""


@dataclass
class Availability:
    """Whether the engine answers, and when to try again after it did not."""

    on_change: HealthListener
    up: bool | None = None  # None: not asked yet
    failures: int = 0
    retry_at: float = 0.0  # time.monotonic() before which no request is sent
    message: str = ""

    def waiting(self) -> str | None:
        """Why no request goes out now (None: go ahead)."""
        if self.up is False and time.monotonic() < self.retry_at:
            return self.message
        return None

    def failed(self, message: str) -> None:
        self.failures += 1
        self.retry_at = time.monotonic() + BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]
        changed = self.up is not False or message != self.message
        self.up, self.message = False, message
        if changed:
            log.warning("engine unavailable: %s", message)
            self.on_change(False, message)

    def succeeded(self, message: str) -> None:
        was = self.up
        self.up, self.failures, self.retry_at, self.message = True, 0, 0.0, message
        if was is not True:
            log.info("engine ready: %s", message)
            self.on_change(True, message)


class EngineBackend:
    """LocalBackend's counterpart for a serving engine: the same prepare / complete /
    count_tokens / forget, the model's work done over HTTP."""

    def __init__(
        self,
        client: Engine,
        *,
        timeout_s: float = 5.0,
        on_health: HealthListener = lambda up, message: None,
    ) -> None:
        self.client = client
        self.timeout_s = timeout_s
        self.info: EngineInfo | None = None
        self.health = Availability(on_health)
        self._single_tokens: dict[str, bool] = {}  # marker -> one token of the vocabulary

    @property
    def name(self) -> str:
        return self.info.model if self.info else self.client.engine

    def connect(self, deadline: float | None = None) -> EngineInfo | None:
        """What the engine serves (asked once, again after a failure); None while it is down."""
        if self.info is not None:
            return self.info
        if self.health.waiting() is not None:
            return None
        try:
            info = self.client.probe(deadline or deadline_in(self.timeout_s))
        except EngineError as err:
            self.health.failed(str(err))
            return None
        except Cancelled:
            return None
        for note in info.notes:
            log.info("%s: %s", info.engine, note)
        self.info = info
        self._single_tokens = {}  # the model may have changed
        self.health.succeeded(f"{info.describe()} ready")
        return info

    def warm_up(self, request: CompletionRequest | None = None) -> None:
        self.connect()

    def session_ended(self) -> None:
        """Nothing of a session lives here."""

    def forget(self, buffer_id: str) -> None:
        """Nothing per buffer lives here: the engine's prefix cache is its own."""

    # -- prompt ---------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Estimated from the characters per token measured with the engine's tokenizer once
        (a round trip per count would cost more than the packing): the same text always counts
        the same, so the prompt's layout does not move between keystrokes."""
        ratio = self.info.chars_per_token if self.info else DEFAULT_CHARS_PER_TOKEN
        return math.ceil(len(text) / ratio) if text else 0

    def context_budget(self, request: CompletionRequest) -> int:
        limit = self.info.context_length if self.info else None
        if not limit:
            return max(16, request.budget_tokens)
        room = int((limit - request.max_new_tokens - MARKER_RESERVE) * CONTEXT_HEADROOM)
        return max(16, min(request.budget_tokens, room))

    def latency(self, request: CompletionRequest) -> dict[str, Any]:
        """How prompts are sized (memosight/stats): the whole budget, the engine prefills."""
        return {"promptTokens": self.context_budget(request), "timeoutMs": self.timeout_s * 1000}

    def prewarm(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        pin: bool = True,
    ) -> dict[str, Any]:
        """Nothing: the engine's prefix cache fills on the first request."""
        return {"promptTokens": 0, "prefilledTokens": 0, "cancelled": False}

    def prepare(self, request: CompletionRequest, *, stable: bool = True) -> Prompt:
        """The prompt at the cursor, as the in-process engine builds it, in the engine's FIM
        format, with the partial word at the cursor backed off (token healing, see complete).
        Packed afresh every time (`stable` is the in-process engine's pinned head)."""
        info = self.connect()
        packed = pack_context(request, self.context_budget(request), self.count_tokens)
        return build_prompt(packed, info.fim if info else None)

    # -- completion -----------------------------------------------------------------------

    def complete(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        deadline: Deadline | None = None,
        on_partial: Callable[[Completion], None] | None = None,
    ) -> Completion:
        """The completion from the engine, whole: its own deadline is model.timeoutMs (the
        first-response deadline and partial answers are the in-process decoder's)."""
        started = time.perf_counter()
        until = deadline_in(self.timeout_s)
        cancelled = cancelled or never
        cursor = plan_of(request)  # the one the request carries (the server's), else made here
        if cursor.refused is not None:
            return Completion(text="", reason=cursor.refused)
        info = self.connect(until)
        if info is None:
            return self._failure(started, "unavailable", self.health.message)
        situation, multiline = cursor.situation, cursor.multiline
        prompt = self.prepare(request)
        context, healed = prompt.context, prompt.healed
        # Token healing without a constraint (these APIs cannot force the first tokens): the
        # prompt ends before the partial word (and the blank before it), the model writes the
        # word again, and an answer that does not start with the backed-off text is dropped;
        # the stream is closed as soon as it diverges.
        prefix = context.prefix[: len(context.prefix) - len(healed)]
        pieces = PromptPieces(
            text=prompt.text,
            prefix=prefix[context.cross_chars :],
            suffix=context.suffix,
            extra=context.cross_files,
        )
        generate = GenerateRequest(
            prompt=pieces,
            max_tokens=request.max_new_tokens,
            deadline=until,
            # On a blank line the model's leading line breaks are skipped (postprocess), so
            # the engine must not stop at them: should_stop ends the stream instead.
            stop=() if multiline or postprocess.on_blank_line(situation) else ("\n",),
        )
        try:

            def enough(text: str) -> bool:
                if not text.startswith(healed):
                    return not healed.startswith(text)  # diverged from the word: stop
                return postprocess.should_stop(text[len(healed) :], situation, multiline)

            result = self.client.generate(generate, on_text=enough, cancelled=cancelled)
        except Cancelled:
            return Completion(
                text="", reason="the request was superseded or cancelled", stop_reason="cancelled"
            )
        except EngineError as err:
            return self._engine_error(started, err)
        self.health.succeeded(f"{info.describe()} ready")
        healed_ok = result.text.startswith(healed)
        raw = result.text[len(healed) :] if healed_ok else ""
        text = postprocess.finish(raw, situation, multiline)
        through = None  # the line through the code after the cursor, when it is that
        if result.finish != "deadline":  # a line cut short may end anywhere
            through = postprocess.through_rest(raw, situation, multiline)
        total_ms = (time.perf_counter() - started) * 1000
        first_ms = result.first_token_ms or 0.0
        return Completion(
            text=through or text,
            replaces_rest=through is not None,
            reason=None if through or text else (EMPTY if healed_ok else NOT_THE_WORD),
            multiline=multiline,
            new_tokens=result.completion_tokens or self.count_tokens(result.text),
            prompt_tokens=result.prompt_tokens or self.count_tokens(prompt.text),
            prefill_ms=first_ms,
            decode_ms=max(0.0, result.total_ms - first_ms),
            total_ms=total_ms,
            stop_reason=result.finish,
            model=info.model,
            raw=raw,
            stats={"engine": {"name": info.engine, **result.stats()}},
        )

    # -- raw completions (next edits) -------------------------------------------------------

    def has_token(self, token: str) -> bool:
        """Whether `token` is one token of the served model's vocabulary (asked once per model;
        False while the engine cannot say)."""
        if token not in self._single_tokens:
            try:
                answer = self.client.has_token(token, deadline_in(self.timeout_s))
            except (EngineError, Cancelled, AttributeError):  # AttributeError: a stand-in backend
                return False
            self._single_tokens[token] = bool(answer)
        return self._single_tokens[token]

    def count_exact(self, text: str, deadline: float) -> int:
        """Tokens of `text` by the engine's own tokenizer where the backend has one (llama.cpp,
        vLLM), else estimated at RAW_CHARS_PER_TOKEN; estimated too when the call fails (the
        completion then says what is wrong)."""
        tokenize = getattr(self.client, "tokenize", None)
        if tokenize is not None:
            try:
                return len(tokenize(text, deadline))
            except (EngineError, Cancelled):
                pass
        return math.ceil(len(text) / RAW_CHARS_PER_TOKEN)

    def complete_raw(
        self,
        text: str,
        *,
        max_tokens: int,
        stop: tuple[str, ...],
        deadline: float,
        on_text: Callable[[str], bool],
        cancelled: Callable[[], bool] | None = None,
        bound: str = "completion.maxWaitMs",
    ) -> RawCompletion:
        """The engine's greedy continuation of `text` as it is (its raw completion endpoint),
        streamed to `on_text` (True: enough), ending at a `stop` string, `max_tokens` or the
        deadline (with the text so far). The same health and backoff as a completion; `bound`
        names the setting the deadline comes from, for the reason."""
        started = time.perf_counter()
        info = self.connect(min(deadline, deadline_in(self.timeout_s)))
        if info is None:
            message = self.health.message or "not reachable"
            return RawCompletion(reason=f"engine unavailable: {message}", stop_reason="unavailable")
        request = GenerateRequest(
            prompt=PromptPieces(text=text, prefix=text, suffix=""),
            max_tokens=max_tokens,
            deadline=deadline,
            stop=stop,
            raw=True,
        )
        try:
            result = self.client.generate(request, on_text=on_text, cancelled=cancelled or never)
        except Cancelled:
            return RawCompletion(
                reason="the request was superseded or cancelled", stop_reason="cancelled"
            )
        except EngineError as err:
            if err.kind == "timeout":
                reason = f"engine too slow: no answer within {bound}"
                log.info("%s", reason)
                return RawCompletion(reason=reason, stop_reason="deadline")
            failure = self._engine_error(started, err)
            return RawCompletion(reason=failure.reason, stop_reason=failure.stop_reason)
        self.health.succeeded(f"{info.describe()} ready")
        return RawCompletion(result=result)

    def _engine_error(self, started: float, err: EngineError) -> Completion:
        if err.kind == "timeout":
            reason = f"no answer within model.timeoutMs ({self.timeout_s * 1000:.0f} ms)"
            log.info("%s", reason)
            return self._failure(started, "deadline", reason)
        if err.kind == "status" and err.status in REQUEST_STATUSES:
            log.warning("the engine refused the request: %s", err)
            return self._failure(started, "error", str(err))
        self.info = None  # ask again what it serves once it is back (it may have changed)
        self.health.failed(str(err))
        return self._failure(started, "error", str(err))

    def _failure(self, started: float, stop_reason: str, message: str) -> Completion:
        return Completion(
            text="",
            reason=f"{_FAILURE_WORDS[stop_reason]}: {message}",
            total_ms=(time.perf_counter() - started) * 1000,
            stop_reason=stop_reason,
            model=self.name,
            stats={"engine": {"name": self.client.engine, "finish": stop_reason}},
        )
