"""One completion request, end to end: policy checks, type-through cache, the model worker,
stale-result dropping and the speculative precompute of the next completion.

Handlers call `CompletionFlow.complete`; it never raises for bad input, it answers with an empty
`Outcome` carrying the reason instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lsprotocol import types
from pygls.workspace import TextDocument

from memosight_lsp.completion.lookahead import LookaheadCache, LookaheadEntry
from memosight_lsp.completion.policy import describe_cursor
from memosight_lsp.completion.scheduler import Scheduler
from memosight_lsp.completion.service import Completion, CompletionRequest
from memosight_lsp.config import Settings
from memosight_lsp.workspace import WorkspaceIndex

from .documents import LineIndex, looks_binary, window_at
from .model_host import ModelHost
from .stats import ServerStats

log = logging.getLogger(__name__)


# Completion.stats["kvCompression"] -> the memosight/stats counter of that KV mode.
_KV_COUNTERS = {"lossless-draft": "losslessDraftCalls", "lossy-snapkv": "lossySnapkvCalls"}


@dataclass(frozen=True, kw_only=True)
class Outcome:
    text: str = ""
    reason: str | None = None
    position: types.Position | None = None  # the cursor, in client units
    source: str = "none"  # model | typeThrough | precompute | none


@dataclass(frozen=True, kw_only=True)
class Cursor:
    uri: str
    version: int | None
    text: str
    offset: int
    position: types.Position  # clamped, in client units
    language_id: str | None
    path: str | None


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
    ) -> None:
        self.scheduler = scheduler
        self._context_inputs = context_inputs
        self.host = host
        self.stats = stats
        self.lookahead = LookaheadCache()
        self._settings = settings
        self._on_model_result = on_model_result
        self._index: dict[str, LineIndex] = {}
        self._precompute_bases: dict[str, LookaheadEntry] = {}
        # buffer -> key of a state the precompute found nothing for: answered empty at once.
        self._known_empty: dict[str, tuple] = {}
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
        return Cursor(
            uri=doc.uri,
            version=doc.version,
            text=index.text,
            offset=offset,
            position=index.position_at(codec, offset),
            language_id=doc.language_id,
            path=doc.path if doc.uri.startswith("file:") else None,
        )

    def document_changed(self, doc: TextDocument) -> None:
        """Invalidate what an edit made useless: lookahead entries and a stale precompute."""
        text = doc.source
        self.lookahead.prune(doc.uri, text)
        base = self._precompute_bases.get(doc.uri)
        if base is not None and base.typed(text) is None:
            self.scheduler.cancel_buffer(doc.uri, ("precompute",))
            del self._precompute_bases[doc.uri]

    def document_closed(self, uri: str) -> None:
        self.scheduler.cancel_buffer(uri)
        self.lookahead.forget(uri)
        self._index.pop(uri, None)
        self._precompute_bases.pop(uri, None)
        self._known_empty.pop(uri, None)
        if self.host.engine is not None:
            self.host.engine.forget(uri)

    def settings_changed(self) -> None:
        self.generation += 1
        self.lookahead.clear()
        self._precompute_bases.clear()
        self._known_empty.clear()

    # -- completion -------------------------------------------------------------------------

    def refusal(self, cursor: Cursor, settings: Settings) -> str | None:
        """Why there is no completion at this cursor before asking the model, if any."""
        if not settings.enable:
            return "completions are disabled (memosight.enable is false)"
        if cursor.language_id and not settings.language_enabled(cursor.language_id):
            return f"completions are disabled for language '{cursor.language_id}'"
        return None

    async def complete(self, doc: TextDocument | None, position: types.Position) -> Outcome:
        started = time.perf_counter()
        self.stats.count("requests")
        if doc is None:
            self.stats.count("empty")
            return Outcome(reason="unknown document: it was never opened with didOpen")
        settings = self._settings()
        cursor = self.cursor(doc, position)
        reason = self.refusal(cursor, settings)
        if reason is not None:
            self.stats.count("empty")
            return Outcome(reason=reason, position=cursor.position)
        if settings.completion.type_through:
            hit = self.lookahead.lookup(cursor.uri, cursor.text, cursor.offset)
            if hit is not None:
                source = "precompute" if hit.entry.source == "precompute" else "typeThrough"
                self.stats.count("typeThroughHits")
                if source == "precompute":
                    self.stats.count("precomputeHits")
                self.stats.served((time.perf_counter() - started) * 1000, type_through=True)
                self._maybe_precompute(cursor, hit.text, settings)
                return Outcome(text=hit.text, position=cursor.position, source=source)
        outcome = await self._from_model(cursor, settings)
        if outcome.text:
            self.stats.served((time.perf_counter() - started) * 1000)
            self._maybe_precompute(cursor, outcome.text, settings)
        else:
            self.stats.count("empty")
        return outcome

    def request_for(self, text: str, offset: int, cursor: Cursor, settings: Settings):
        window = window_at(text, offset)
        inputs = self._context_inputs(cursor, settings)
        request = CompletionRequest(
            text=window.text,
            line=window.line,
            column=window.column,
            path=cursor.path,
            language_id=cursor.language_id,
            buffer_id=cursor.uri,
            max_new_tokens=settings.completion.max_new_tokens,
            budget_tokens=settings.context.budget_tokens,
            multiline=settings.completion.multiline,
            mid_word=settings.completion.mid_word,
            plain=not settings.completion.speculative,
            kv_compression=settings.compression.kv_compression,
            kv_ratio=settings.compression.kv_ratio,
            min_prompt_tokens=settings.compression.min_prompt_tokens,
            index=inputs.index,
            open_buffers=inputs.open_buffers,
            recent_edits=inputs.recent_edits,
        )
        return window, request

    async def _from_model(self, cursor: Cursor, settings: Settings) -> Outcome:
        self.host.ensure(settings.model)
        if self.host.state == "error":
            return Outcome(reason=f"model error: {self.host.message}", position=cursor.position)
        window, request = self.request_for(cursor.text, cursor.offset, cursor, settings)
        if looks_binary(window):
            return Outcome(reason="the file looks binary (NUL bytes)", position=cursor.position)
        key = (cursor.offset, len(cursor.text), hash(cursor.text), self.generation)
        if self._known_empty.get(cursor.uri) == key:
            return Outcome(reason="the model suggested nothing here", position=cursor.position)
        entry_base = (cursor.text[: cursor.offset], cursor.text[cursor.offset :])
        job = self.scheduler.submit(
            cursor.uri,
            lambda cancelled: self._run_model(request, entry_base, cancelled, "modelCalls"),
            key=key,
            delay_s=settings.completion.debounce_ms / 1000,
        )
        try:
            completion = await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.release()
            self.stats.count("cancelled")
            raise
        if completion is None:
            if self.host.state == "error":
                return Outcome(reason=f"model error: {self.host.message}", position=cursor.position)
            self.stats.count("superseded")
            return Outcome(reason="superseded by a newer request", position=cursor.position)
        current = self._current_version(cursor.uri)
        if current is not None and current != cursor.version:
            self.stats.count("dropped")
            return Outcome(reason="the document changed meanwhile", position=cursor.position)
        return Outcome(
            text=completion.text, reason=completion.reason, position=cursor.position, source="model"
        )

    # Set by the server: the current version of an open document (None if unknown).
    _current_version: Callable[[str], int | None] = staticmethod(lambda uri: None)

    def _run_model(
        self,
        request: CompletionRequest,
        base: tuple[str, str],
        cancelled: Callable[[], bool],
        counter: str,
        *,
        ghost_prefix: str = "",
        key: tuple | None = None,
    ) -> Completion | None:
        """On the worker: one model completion, remembered for type-through."""
        engine = self.host.engine
        if engine is None:
            return None
        self.stats.count(counter)
        try:
            completion = engine.complete(request, cancelled=cancelled)
        except Exception as err:  # the model or the context failed: answer empty, keep serving
            self.stats.count("errors")
            engine.forget(request.buffer_id or "")  # its KV cache may be half-written
            log.error("completion failed (%s: %s); answered empty", type(err).__name__, err)
            log.debug("completion failure", exc_info=True)
            return Completion(text="", reason=f"model error: {type(err).__name__}: {err}")
        kv_counter = _KV_COUNTERS.get(completion.stats.get("kvCompression", "off"))
        if kv_counter is not None:
            self.stats.count(kv_counter)
        if completion.text:
            self.stats.tokens(completion.new_tokens)
            before, after = base
            self.lookahead.put(
                request.buffer_id or "",
                LookaheadEntry(
                    before=before,
                    after=after,
                    ghost=ghost_prefix + completion.text,
                    min_typed=len(ghost_prefix),
                    tokens=completion.new_tokens,
                    source="precompute" if ghost_prefix else "model",
                ),
            )
        elif key is not None and completion.stop_reason != "cancelled":
            self._known_empty[request.buffer_id or ""] = key
        if counter == "modelCalls":
            self._on_model_result(completion)
        return completion

    def _maybe_precompute(self, cursor: Cursor, shown: str, settings: Settings) -> None:
        """Start computing the completion that follows `shown` once it is accepted."""
        if not (settings.completion.precompute_next and settings.completion.type_through):
            return
        if self.host.engine is None:
            return
        before, after = cursor.text[: cursor.offset], cursor.text[cursor.offset :]
        base = LookaheadEntry(before=before, after=after, ghost=shown)
        if self._precompute_bases.get(cursor.uri) == base:
            return
        accepted_text = before + shown + after
        accepted_offset = cursor.offset + len(shown)
        for entry in self.lookahead.entries(cursor.uri):
            if entry.rest(accepted_text, accepted_offset) is not None:
                return  # already known
        self._precompute_bases[cursor.uri] = base
        _, request = self.request_for(accepted_text, accepted_offset, cursor, settings)
        key = (accepted_offset, len(accepted_text), hash(accepted_text), self.generation)
        self.scheduler.submit(
            cursor.uri,
            lambda cancelled: self._run_model(
                request, (before, after), cancelled, "precomputeCalls", ghost_prefix=shown, key=key
            ),
            kind="precompute",
            key=key,
        )

    # -- explain ----------------------------------------------------------------------------

    def explain(self, cursor: Cursor, settings: Settings) -> str | None:
        """Why there would be no completion at this cursor, if any."""
        window = window_at(cursor.text, cursor.offset)
        reason = self.refusal(cursor, settings)
        if reason is None and looks_binary(window):
            reason = "the file looks binary (NUL bytes)"
        if reason is None and self.host.state == "error":
            reason = f"model error: {self.host.message}"
        if reason is None and settings.completion.mid_word == "skip":
            lines = window.text.split("\n")
            row = lines[window.line] if window.line < len(lines) else ""
            situation = describe_cursor(row[: window.column], row[window.column :])
            if situation.mid_word:
                reason = "the cursor is inside a word (midWord is 'skip')"
        return reason
