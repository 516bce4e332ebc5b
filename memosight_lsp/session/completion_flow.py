"""One completion request, end to end: policy checks, type-through cache, the model worker,
stale-result dropping, the first-response deadline, the speculative precompute of the next
completion and the pre-warm of a buffer's prompt.

A request with type-through on answers by `completion.firstResponseMs` with what the model has
verified so far, or, when nothing is verified by then, with its first text when it comes (an empty
answer would leave the editor blank while the user waits); the model decodes on (as a precompute:
the next request cancels it) and each longer text replaces the suggestion in the type-through
cache, so the next keystroke gets it. When the decode ends with more than was answered, the client
is told (`on_longer`: memosight/completionUpdated) and asks again where nothing changed.

No job runs for ever: every model job is abandoned `GIVE_UP_GRACE_S` past `completion.maxWaitMs`
(session/scheduler.py), by when decoding has stopped by itself unless the worker is stuck.

Handlers call `CompletionFlow.complete`; it never raises for bad input, it answers with an empty
`Outcome` carrying the reason instead. `CompletionFlow.refusal` is the one answer to "why no
completion here?", for completions and for memosight/context alike.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from lsprotocol import types
from pygls.workspace import TextDocument

from memosight_lsp.config import Settings
from memosight_lsp.pipeline.engine_backend import ENGINE_FAILURES
from memosight_lsp.pipeline.request import (
    Completion,
    CompletionBackend,
    CompletionRequest,
    Deadline,
    plan_cursor,
)
from memosight_lsp.session.scheduler import Job, JobAbandoned, Scheduler
from memosight_lsp.session.type_through import TypeThroughCache, TypeThroughEntry
from memosight_lsp.workspace import WorkspaceIndex
from memosight_lsp.workspace.files import is_binary

from .documents import LineIndex, window_at
from .model_host import ModelHost
from .stats import ServerStats

log = logging.getLogger(__name__)


# Completion.stats["kvCompression"] -> the memosight/stats counter of that KV mode.
_KV_COUNTERS = {"lossless-draft": "losslessDraftCalls", "lossy-snapkv": "lossySnapkvCalls"}

UNKNOWN_DOCUMENT = "unknown document: it was never opened with didOpen"
DISABLED = "completions are disabled (memosight.enable is false)"
BINARY = "the file looks binary (NUL bytes)"
# Past completion.maxWaitMs a decode stops by itself; a job still running this much later is
# stuck (a loop that polls nothing, a lock) and is abandoned.
GIVE_UP_GRACE_S = 2.0


@dataclass(eq=False)
class EarlyAnswer:
    """What the model job for one buffer state answers by a first-response deadline, shared by
    the requests that join the job."""

    future: Future = field(default_factory=Future)
    # The earliest deadline of a request waiting on it: a precompute has none of its own until
    # a request catches up with it (else its whole decode would be that request's wait).
    deadline: float = math.inf


@dataclass(frozen=True, kw_only=True)
class Outcome:
    text: str = ""
    reason: str | None = None
    position: types.Position | None = None  # the cursor, in client units
    # model | partial (by the deadline) | typeThrough | precompute | abandoned (stuck) | none
    source: str = "none"
    # Other items beside `text` (completion.alternatives): only from a model run that ended by
    # the request's first-response deadline; a cache hit or an early answer carries none.
    alternatives: tuple[str, ...] = ()
    # `text` holds the rest of the cursor's line and replaces it (Completion.replaces_rest).
    replaces_rest: bool = False
    # The cursor's line after the cursor, and where that line ends (client units), as the
    # document read when the answer was made: an item may replace that rest (server/
    # features.py inline_item).
    line_rest: str = ""
    line_end: types.Position | None = None


@dataclass(frozen=True, kw_only=True)
class Cursor:
    uri: str
    version: int | None
    text: str
    offset: int
    position: types.Position  # clamped, in client units
    language_id: str | None
    path: str | None
    line_rest: str  # the cursor's line after the cursor, without its line break
    line_end: types.Position  # where that line ends, in client units


@dataclass(frozen=True, kw_only=True)
class ContextInputs:
    """Cross-file context for a request (see CompletionRequest): none by default."""

    index: WorkspaceIndex | None = None
    open_buffers: Mapping[str, str] = field(default_factory=dict)
    recent_edits: tuple[tuple[str, int], ...] = ()


class CompletionFlow:
    def __init__(
        self,
        *,
        scheduler: Scheduler,
        host: ModelHost,
        stats: ServerStats,
        settings: Callable[[], Settings],
        on_model_result: Callable[[Completion], None] = lambda c: None,
        context_inputs: Callable[[Cursor, Settings], ContextInputs] = lambda c, s: ContextInputs(),
        current_version: Callable[[str], int | None] = lambda uri: None,
        on_longer: Callable[[Cursor, str], None] = lambda cursor, text: None,
    ) -> None:
        """`current_version(uri)`: the open document's version now (None if unknown), to drop a
        model result whose document changed while it was computed. `on_longer(cursor, text)`:
        an early answer at `cursor` grew to `text` once decoding ended (on the event loop)."""
        self.scheduler = scheduler
        self._context_inputs = context_inputs
        self._current_version = current_version
        self.host = host
        self.stats = stats
        self.type_through = TypeThroughCache()
        self._settings = settings
        self._on_model_result = on_model_result
        self._on_longer = on_longer
        self._index: dict[str, LineIndex] = {}
        self._precompute_bases: dict[str, TypeThroughEntry] = {}
        # buffer -> key of a state the precompute found nothing for: answered empty at once.
        self._known_empty: dict[str, tuple] = {}
        # State key -> the early answer of the model job for it (a joining request shares it).
        self._early: dict[Hashable, EarlyAnswer] = {}
        # buffer -> the request decoding on after its early answer (no precompute meanwhile).
        self._continuing: dict[str, Job] = {}
        self.generation = 0  # bumped on settings changes: cached work from older settings is unused

    # -- documents --------------------------------------------------------------------------

    def line_index(self, doc: TextDocument) -> LineIndex:
        cached = self._index.get(doc.uri)
        text = doc.source
        if cached is None or cached.text is not text:
            cached = LineIndex.of(text)
            self._index[doc.uri] = cached
        return cached

    def cursor(self, doc: TextDocument, position: types.Position) -> Cursor:
        index = self.line_index(doc)
        codec = doc.position_codec
        offset = index.offset_at(codec, position)
        line_end = index.line_end(offset)
        return Cursor(
            uri=doc.uri,
            version=doc.version,
            text=index.text,
            offset=offset,
            position=index.position_at(codec, offset),
            language_id=doc.language_id,
            path=doc.path if doc.uri.startswith("file:") else None,
            line_rest=index.text[offset:line_end],
            line_end=index.position_at(codec, line_end),
        )

    def document_changed(self, doc: TextDocument) -> None:
        """Invalidate what an edit made useless: type-through entries and a stale precompute."""
        text = doc.source
        self.type_through.prune(doc.uri, text)
        base = self._precompute_bases.get(doc.uri)
        if base is not None and base.typed(text) is None:
            self.scheduler.cancel_buffer(doc.uri, ("precompute",))
            del self._precompute_bases[doc.uri]

    def document_closed(self, uri: str) -> None:
        self.scheduler.cancel_buffer(uri)
        self.type_through.forget(uri)
        self._index.pop(uri, None)
        self._precompute_bases.pop(uri, None)
        self._known_empty.pop(uri, None)
        self._continuing.pop(uri, None)
        if self.host.backend is not None:
            self.host.backend.forget(uri)

    def settings_changed(self) -> None:
        self.generation += 1
        self.type_through.clear()
        self._precompute_bases.clear()
        self._known_empty.clear()

    # -- completion -------------------------------------------------------------------------

    def refusal(self, cursor: Cursor | None, settings: Settings) -> str | None:
        """Why there is no completion at this cursor (None: the model is asked): the one answer
        to "why no completion here?", a completion's reason and memosight/context's.

        In order: the document is unknown (cursor None); completions are off, everywhere or for
        the language; the model failed to load; the text is binary; the cursor's plan refuses
        (request.plan_cursor: a generated file, a data line, inside a word under midWord
        'skip'), the very plan a completion's request carries to the engine. `complete` asks in
        two steps: the settings' reasons first, then, when no text the model already gave is
        being typed through, the rest.
        """
        reason = self._switched_off(cursor, settings)
        if reason is None and cursor is not None:
            reason, _ = self._planned(cursor, settings)
        return reason

    @staticmethod
    def _switched_off(cursor: Cursor | None, settings: Settings) -> str | None:
        if cursor is None:
            return UNKNOWN_DOCUMENT
        if not settings.enable:
            return DISABLED
        if cursor.language_id and not settings.language_enabled(cursor.language_id):
            return f"completions are disabled for language '{cursor.language_id}'"
        return None

    def _planned(
        self, cursor: Cursor, settings: Settings
    ) -> tuple[str | None, CompletionRequest | None]:
        """(None, the request for the model at this cursor, carrying its plan), or (why there is
        none, None). Decided here on the event loop, once: a refusal costs no worker hop and no
        debounce, and the engine follows the plan it is handed instead of making its own."""
        if self.host.state == "error" and self.host.backend is None:
            # A failed load. (A serving engine that is down keeps its engine: it retries.)
            return f"model error: {self.host.message}", None
        window, request = self.request_for(cursor.text, cursor.offset, cursor, settings)
        if is_binary(window.text):
            return BINARY, None
        plan = plan_cursor(request, document=cursor.text)
        if plan.refused is not None:  # nothing is queued for it
            return plan.refused, None
        return None, replace(request, plan=plan)

    async def complete(self, doc: TextDocument | None, position: types.Position) -> Outcome:
        started = time.perf_counter()
        self.stats.count("requests")
        settings = self._settings()
        cursor = self.cursor(doc, position) if doc is not None else None
        reason = self._switched_off(cursor, settings)
        if reason is not None or cursor is None:
            self.stats.count("empty")
            return Outcome(reason=reason, position=cursor.position if cursor else None)
        if settings.completion.type_through:
            hit = self.type_through.lookup(cursor.uri, cursor.text, cursor.offset)
            if hit is not None:
                source = "precompute" if hit.entry.source == "precompute" else "typeThrough"
                self.stats.count("typeThroughHits")
                if source == "precompute":
                    self.stats.count("precomputeHits")
                self.stats.served((time.perf_counter() - started) * 1000, type_through=True)
                self._maybe_precompute(cursor, hit.text, settings, hit.replaces_rest)
                outcome = Outcome(
                    text=hit.text,
                    position=cursor.position,
                    source=source,
                    replaces_rest=hit.replaces_rest,
                )
                return on_line(outcome, cursor)
        outcome = await self._from_model(cursor, settings)
        if outcome.text:
            self.stats.served((time.perf_counter() - started) * 1000)
            self._maybe_precompute(cursor, outcome.text, settings, outcome.replaces_rest)
        else:
            self.stats.count("empty")
        return on_line(outcome, cursor)

    def request_for(self, text: str, offset: int, cursor: Cursor, settings: Settings):
        window = window_at(text, offset)
        inputs = self._context_inputs(cursor, settings)
        request = CompletionRequest.from_settings(
            settings,
            text=window.text,
            line=window.line,
            column=window.column,
            path=cursor.path,
            language_id=cursor.language_id,
            buffer_id=cursor.uri,
            index=inputs.index,
            open_buffers=inputs.open_buffers,
            recent_edits=inputs.recent_edits,
        )
        return window, request

    async def _from_model(self, cursor: Cursor, settings: Settings) -> Outcome:
        arrived = time.monotonic()
        self.host.ensure(settings.model)
        reason, request = self._planned(cursor, settings)
        if request is None:
            return Outcome(reason=reason, position=cursor.position)
        key = (cursor.offset, len(cursor.text), hash(cursor.text), self.generation)
        if self._known_empty.get(cursor.uri) == key:
            return Outcome(reason="the model suggested nothing here", position=cursor.position)
        entry_base = (cursor.text[: cursor.offset], cursor.text[cursor.offset :])
        completion_settings = settings.completion
        deadline = None
        if completion_settings.type_through and completion_settings.first_response_ms > 0:
            delay = completion_settings.debounce_ms + completion_settings.first_response_ms
            deadline = arrived + delay / 1000
        answer = self._early.setdefault(key, EarlyAnswer())
        if deadline is not None:
            answer.deadline = min(answer.deadline, deadline)
        early = answer.future
        job = self.scheduler.submit(
            cursor.uri,
            lambda cancelled: self._run_model(
                request, entry_base, cancelled, "modelCalls", deadline=deadline, early=early
            ),
            key=key,
            delay_s=completion_settings.debounce_ms / 1000,
            give_up_s=give_up_s(settings),
            # A late request may take its answer as the type-through cache would have served
            # it; with type-through off every request runs the model.
            reusable=has_text if completion_settings.type_through else None,
        )
        job.future.add_done_callback(lambda _: self._early.pop(key, None))
        try:
            await asyncio.wait(
                {asyncio.wrap_future(job.future), asyncio.wrap_future(early)},
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            job.release()
            self.stats.count("cancelled")
            raise
        try:
            completion = job.future.result() if job.future.done() else early.result()
        except JobAbandoned as err:
            self.stats.count("abandoned")
            return Outcome(reason=str(err), position=cursor.position, source="abandoned")
        if completion is None:  # the model failed meanwhile, or a newer request took over
            reason = self.refusal(cursor, settings)
            if reason is not None:
                return Outcome(reason=reason, position=cursor.position)
            self.stats.count("superseded")
            return Outcome(reason="superseded by a newer request", position=cursor.position)
        current = self._current_version(cursor.uri)
        if current is not None and current != cursor.version:
            self.stats.count("dropped")
            return Outcome(reason="the document changed meanwhile", position=cursor.position)
        if completion.stop_reason == "partial":
            self.stats.count("partialAnswers")
            self._continue_after(job, cursor, settings, completion.text)
            reason = completion.reason or (None if completion.text else "still decoding")
            return Outcome(
                text=completion.text, reason=reason, position=cursor.position, source="partial"
            )
        return Outcome(
            text=completion.text,
            reason=completion.reason,
            position=cursor.position,
            source="model",
            alternatives=tuple(completion.alternatives),
            replaces_rest=completion.replaces_rest,
        )

    def _continue_after(self, job: Job, cursor: Cursor, settings: Settings, shown: str) -> None:
        """The request answered early with `shown` and decodes on: no precompute for this buffer
        until it ends; then, while the document still agrees, the client hears of the longer
        suggestion (`on_longer`) and the precompute of what follows it starts."""
        self._continuing[cursor.uri] = job

        def ended(future: Future) -> None:
            if self._continuing.get(cursor.uri) is job:
                del self._continuing[cursor.uri]
            completion = None if future.cancelled() or future.exception() else future.result()
            if completion is None or not completion.text:
                return
            if self._current_version(cursor.uri) not in (None, cursor.version):
                return  # typed meanwhile: that keystroke's request answers for itself
            base = (cursor.text[: cursor.offset], cursor.text[cursor.offset :])
            if any(
                (e.before, e.after, e.ghost) == (*base, completion.text)
                for e in self.type_through.entries(cursor.uri)
            ):
                if completion.text != shown:
                    self.stats.count("longerPushed")
                    self._on_longer(cursor, completion.text)
                self._maybe_precompute(cursor, completion.text, settings, completion.replaces_rest)

        loop = asyncio.get_running_loop()
        job.future.add_done_callback(lambda future: loop.call_soon_threadsafe(ended, future))

    def _run_model(
        self,
        request: CompletionRequest,
        base: tuple[str, str],
        cancelled: Callable[[], bool],
        counter: str,
        *,
        ghost_prefix: str = "",
        prefix_kept: tuple[int, int] = (0, 0),
        key: tuple | None = None,
        deadline: Deadline | None = None,
        early: Future | None = None,
    ) -> Completion | None:
        """On the worker: one model completion, remembered for type-through. With a deadline,
        what is verified by then answers the request (`early`) and each longer text after it
        replaces the suggestion in the type-through cache while decoding goes on."""
        backend: CompletionBackend | None = self.host.backend
        if backend is None:
            return None
        self.stats.count(counter)
        buffer_id = request.buffer_id or ""
        before, after = base

        def remember(completion: Completion) -> None:
            if not completion.text:
                return
            kept_at, kept = prefix_kept
            if completion.replaces_rest:
                if ghost_prefix:
                    return  # code kept twice (after the cursor and after `shown`): not kept
                kept_at, kept = kept_code(completion.text, after)
            self.type_through.put(
                buffer_id,
                TypeThroughEntry(
                    before=before,
                    after=after,
                    ghost=ghost_prefix + completion.text,
                    kept_at=kept_at,
                    kept=kept,
                    min_typed=len(ghost_prefix),
                    tokens=completion.new_tokens,
                    source="precompute" if ghost_prefix else "model",
                ),
            )

        def on_partial(partial: Completion) -> None:
            remember(partial)
            if early is not None and not early.done():
                self.scheduler.demote_current()  # answered: the next request cancels it
                early.set_result(partial)

        try:
            completion = backend.complete(
                request,
                cancelled=cancelled,
                deadline=deadline,
                on_partial=on_partial if early is not None and deadline is not None else None,
            )
        except Exception as err:  # the model or the context failed: answer empty, keep serving
            self.stats.count("errors")
            backend.forget(buffer_id)  # its KV cache may be half-written
            log.error("completion failed (%s: %s); answered empty", type(err).__name__, err)
            log.debug("completion failure", exc_info=True)
            return Completion(text="", reason=f"model error: {type(err).__name__}: {err}")
        log.debug(
            "%s: %d prompt tokens (%d reused), prefill %.0f ms, decode %.0f ms, %d tokens, "
            "%d alternatives (%.0f ms), %.0f ms in all, %s",
            counter,
            completion.prompt_tokens,
            completion.stats.get("reusedPromptTokens", 0),
            completion.prefill_ms,
            completion.decode_ms,
            completion.new_tokens,
            len(completion.alternatives),
            completion.stats.get("alternativesMs", 0.0),
            completion.total_ms,
            completion.stop_reason,
        )
        self.stats.count("reusedPromptTokens", completion.stats.get("reusedPromptTokens", 0))
        kv_counter = _KV_COUNTERS.get(completion.stats.get("kvCompression", "off"))
        if kv_counter is not None:
            self.stats.count(kv_counter)
        if "engine" in completion.stats:
            self.stats.engine(completion.stats["engine"])
        if completion.text:
            self.stats.tokens(completion.new_tokens)
            remember(completion)
        elif key is not None and completion.stop_reason not in ("cancelled", *ENGINE_FAILURES):
            self._known_empty[buffer_id] = key
        if counter == "modelCalls":
            self._on_model_result(completion)
        return completion

    def latency_report(self) -> dict | None:
        """How this server sizes prompts now (memosight/stats): the cold prompt, the suffix and
        prefill chunks for the current settings, the measured prefill rate, the pinned heads."""
        backend: CompletionBackend | None = self.host.backend
        if backend is None:
            return None
        settings = self._settings()
        request = CompletionRequest.from_settings(settings, text="", line=0, column=0)
        latency = backend.latency(request)
        return {"firstResponseMs": settings.completion.first_response_ms, **latency}

    # -- pre-warm ---------------------------------------------------------------------------

    def prewarm(self, doc: TextDocument, position: types.Position | None = None) -> None:
        """Prefill the prompt at this cursor (None: the end of the document, a guess for a
        buffer just opened) in the background, at the lowest priority: any request cancels
        it, and whatever it prefilled is reused by the buffer's next completion. A guess does
        not pin the buffer's prompt head: the context chosen for the end of the file would
        otherwise serve a completion anywhere above it (stable_prompt.py)."""
        settings = self._settings()
        if not settings.enable or not settings.completion.speculative:
            return
        guessed = position is None
        if position is None:
            index = self.line_index(doc)
            position = index.position_at(doc.position_codec, len(index.text))
        cursor = self.cursor(doc, position)
        if self._switched_off(cursor, settings) is not None:
            return
        _, request = self._planned(cursor, settings)  # refusal()'s answer and its request
        if request is None:
            return
        key = ("prewarm", cursor.offset, len(cursor.text), hash(cursor.text), self.generation)

        def work(cancelled: Callable[[], bool]) -> dict | None:
            backend: CompletionBackend | None = self.host.backend
            if backend is None:
                return None
            self.stats.count("prewarms")
            done = backend.prewarm(request, cancelled=cancelled, pin=not guessed)
            log.debug("prewarm: %s", done)
            self.stats.count("prewarmedTokens", done.get("prefilledTokens", 0))
            return done

        self.scheduler.submit(
            cursor.uri, work, kind="prewarm", key=key, give_up_s=give_up_s(settings)
        )

    def _maybe_precompute(
        self, cursor: Cursor, shown: str, settings: Settings, replaces_rest: bool = False
    ) -> None:
        """Start computing the completion that follows `shown` once it is accepted (in place
        of the code after the cursor that it holds, with `replaces_rest`)."""
        if not (settings.completion.precompute_next and settings.completion.type_through):
            return
        if self.host.backend is None:
            return
        continuing = self._continuing.get(cursor.uri)
        if continuing is not None and continuing.live:
            return  # it is still extending this suggestion: it precomputes when it ends
        before, after = cursor.text[: cursor.offset], cursor.text[cursor.offset :]
        kept_at, kept = kept_code(shown, after) if replaces_rest else (0, 0)
        base = TypeThroughEntry(before=before, after=after, ghost=shown, kept_at=kept_at, kept=kept)
        if self._precompute_bases.get(cursor.uri) == base:
            return
        accepted_text = before + shown + after[kept:]
        accepted_offset = cursor.offset + len(shown)
        for entry in self.type_through.entries(cursor.uri):
            if entry.rest(accepted_text, accepted_offset) is not None:
                return  # already known
        self._precompute_bases[cursor.uri] = base
        _, request = self.request_for(accepted_text, accepted_offset, cursor, settings)
        request = replace(request, alternatives=1)  # served from the type-through cache: one item
        key = (accepted_offset, len(accepted_text), hash(accepted_text), self.generation)
        # A request that catches up with it joins it: then it answers by that request's
        # deadline, with what is verified, and decodes on like the request would.
        answer = self._early.setdefault(key, EarlyAnswer())
        job = self.scheduler.submit(
            cursor.uri,
            lambda cancelled: self._run_model(
                # Planned on the worker, not here: this runs before the reply showing `shown`.
                replace(request, plan=plan_cursor(request, document=accepted_text)),
                (before, after),
                cancelled,
                "precomputeCalls",
                ghost_prefix=shown,
                prefix_kept=(kept_at, kept),
                key=key,
                deadline=lambda: answer.deadline,
                early=answer.future,
            ),
            kind="precompute",
            key=key,
            give_up_s=give_up_s(settings),
            reusable=has_text,
        )
        job.future.add_done_callback(lambda _: self._early.pop(key, None))


def kept_code(text: str, after: str) -> tuple[int, int]:
    """Where a text that replaces the code after the cursor on its line (Completion.
    replaces_rest) holds that code, and its length: at its last place in the text
    (postprocess.through_rest)."""
    end = after.find("\n")
    rest = (after if end < 0 else after[:end]).removesuffix("\r")
    at = text.rfind(rest)
    return (at, len(rest)) if at >= 0 else (0, 0)  # (not such a text: an insertion)


def on_line(outcome: Outcome, cursor: Cursor) -> Outcome:
    """The outcome with the line it answers: the text after the cursor and the line's end."""
    return replace(outcome, line_rest=cursor.line_rest, line_end=cursor.line_end)


def has_text(completion: Completion | None) -> bool:
    """Whether a finished model job's answer may serve a request at the same buffer state that
    arrives after it ended (the scheduler's `reusable`): an empty answer is not replayed, the
    request asks again (a failed engine may be back; `_known_empty` covers the rest)."""
    return completion is not None and bool(completion.text)


def give_up_s(settings: Settings) -> float:
    """How long a model job may run before the scheduler abandons it as stuck."""
    return settings.completion.max_wait_ms / 1000 + GIVE_UP_GRACE_S
