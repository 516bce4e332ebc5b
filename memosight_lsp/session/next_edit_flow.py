"""memosight/nextEdit: the edit the user is likely to make next, from the buffer's recent edits
(next_edit/predict.py), on the model worker.

A rename follow-up (the last edit renamed an identifier) is answered at once on the event loop,
with no model: no job, no model load, and with a serving engine too (`"source": "rename"`); so
is a string follow-up (the last edit changed a string constant the scope holds again: the next
one changed the same way, `"source": "string"`) and a call-site follow-up (the last edit removed
a parameter from a definition: the next call's argument deleted, `"source": "callsite"`).
Every other edit is the model's: the local model's rewrite (NextEditor), or with model.backend
the serving engine's (next_edit/remote.py), in the prompt format of
nextEdit.promptFormat.

A buffer's next-edit job is queued under its own key (the buffer's uri + NEXT_EDIT_KEY): a newer
nextEdit request of the buffer cancels the older one, as a newer completion cancels an older
completion, and neither kind cancels the other's request. Bad input never raises here: the
answer is empty with a `reason`.

The pause before a request is used (`edited`, `idle`): the editors ask only after the user has
stopped typing for a while, and the server sees the last edit when it is made. The prompt the
request is expected to have (the buffer as it is, the cursor at the end of the last edit:
predict.py's `cursor_after`) is prefilled into the buffer's next-edit cache as a pre-warm job,
the lowest priority of the worker: started when the worker has nothing else to do (after a
didChange, or when it runs out of jobs: the server calls `idle`), cancelled by any request
(a keystroke's completion first of all), by a newer edit, and yielding between two prefill
chunks to any other job that is due (a completion's precompute), what it prefilled kept. One
buffer at a time (the last edited), at most MAX_PREWARM_TRIES starts per edit, each within
completion.maxWaitMs; the caches are the next editor's, a few buffers at most (local.py). The
request then prefills only what its prompt does not share with it; the tokens are the same.
Only with nextEdit.prewarm, for the local model with speculative decoding
(completion.speculative, as the completion pre-warm); a serving engine keeps its own cache.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from lsprotocol import types
from pygls.workspace import TextDocument

from memosight_lsp.config import Settings
from memosight_lsp.next_edit.edit_history import Edit, EditHistory
from memosight_lsp.next_edit.predict import (
    NextEdit,
    NextEditRequest,
    call_site_follow_up_edit,
    cursor_after,
    rename_follow_up_edit,
    string_follow_up_edit,
)
from memosight_lsp.next_edit.remote import RemoteNextEditor
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.session.scheduler import Job, JobAbandoned, Scheduler

from .completion_flow import DISABLED, GIVE_UP_GRACE_S, UNKNOWN_DOCUMENT
from .documents import LineIndex
from .model_host import ModelHost
from .stats import ServerStats

# The local model's modules (torch) are imported where a local model rewrites: the server
# answers `initialize` before it has imported them (session/model_host.py).
if TYPE_CHECKING:
    from memosight_lsp.next_edit.local import NextEditor
    from memosight_lsp.pipeline.local_backend import LocalBackend

log = logging.getLogger(__name__)

NEXT_EDIT_KEY = "#nextEdit"
NO_EDITS = "no recent edits in this buffer"
MAX_PREWARM_TRIES = 8  # pre-warm jobs started for one edit (each preempted one starts again)
HEAD_KEY = "#nextEditHead"  # the scheduler's key of the job that prefills the prompts' head
MAX_HEAD_TRIES = 3  # head jobs started for one loaded model (each preempted one starts again)
# The follow-ups tried before the model, in order, with the counter of each.
FOLLOW_UPS = (
    (rename_follow_up_edit, "nextEditRenames"),  # the last edit was a rename
    (string_follow_up_edit, "nextEditStrings"),  # a string constant changed: its other uses
    (call_site_follow_up_edit, "nextEditCallSites"),  # a parameter removed: its calls updated
)


@dataclass(kw_only=True, eq=False)
class Pause:
    """The buffer edited last, as its next request after the pause is expected to see it: the
    text and edits then (the request is made from them on the worker, off the event loop)."""

    doc: TextDocument  # for its uri, path, language and position codec, which do not change
    text: str
    edits: tuple[Edit, ...]
    settings: Settings
    tries: int = 0  # pre-warm jobs started for it
    job: Job | None = None  # the last of them

    @property
    def uri(self) -> str:
        return self.doc.uri

    @cached_property
    def request(self) -> NextEditRequest:
        """The request expected: the cursor at the end of the last edit (made on first use)."""
        cursor = min(cursor_after(self.edits) or 0, len(self.text))
        line = LineIndex.of(self.text).position_at(self.doc.position_codec, cursor).line
        return request_of(self.doc, self.text, line, cursor, self.edits, self.settings)


class NextEditFlow:
    def __init__(
        self,
        *,
        scheduler: Scheduler,
        host: ModelHost,
        settings: Callable[[], Settings],
        history: EditHistory,
        stats: ServerStats,
    ) -> None:
        self.stats = stats
        self.scheduler = scheduler
        self.host = host
        self.history = history
        self._settings = settings
        self._editor: NextEditor | None = None
        self._remote: RemoteNextEditor | None = None
        self._lock = threading.Lock()  # _pause: the event loop and the worker
        self._pause: Pause | None = None  # what is pre-warmed when the worker is idle
        # The prompts' common head: the backend it is for (weakly: a replaced model is not kept
        # alive by it), the jobs started for it, whether it is done (prefilled, or nothing to
        # prefill), and the last job.
        self._head_for: weakref.ref[Any] | None = None
        self._head_tries = 0
        self._head_done = False
        self._head_job: Job | None = None

    def editor(self, backend: LocalBackend) -> NextEditor:
        """The next editor of the engine's model (made again when the model changes), timed
        with the engine's pass costs when it has them."""
        from memosight_lsp.inference.speculative import SpeculativeDecoder
        from memosight_lsp.next_edit.local import NextEditor

        if self._editor is None or self._editor.loaded is not backend.loaded:
            decoder = backend.decoder
            costs = decoder.cost_model if isinstance(decoder, SpeculativeDecoder) else None
            self._editor = NextEditor(backend.loaded, costs)
        return self._editor

    def remote_editor(self, backend: EngineBackend) -> RemoteNextEditor:
        """The next editor of the serving engine (made again when the engine changes)."""
        if self._remote is None or self._remote.backend is not backend:
            self._remote = RemoteNextEditor(backend)
        return self._remote

    def forget(self, uri: str) -> None:
        self._end_pause(uri)
        if self._editor is not None:
            self._editor.forget(uri + NEXT_EDIT_KEY)

    # -- the pause: pre-warm ----------------------------------------------------------------

    def edited(self, doc: TextDocument) -> None:
        """After a didChange (the edit history has it): the buffer's next-edit prompt, as the
        request after the pause is expected to have it, is pre-warmed when the worker is idle."""
        settings = self._settings()
        if not (settings.enable and settings.next_edit.prewarm and settings.completion.speculative):
            return
        if doc.language_id and not settings.language_enabled(doc.language_id):
            return
        if isinstance(self.host.backend, EngineBackend):
            return  # the engine keeps its own cache
        edits = tuple(self.history.recent(doc.uri))
        if not edits:
            return
        with self._lock:
            self._pause = Pause(doc=doc, text=doc.source, edits=edits, settings=settings)
        self.idle()

    def idle(self) -> None:
        """Start the pre-warm of the buffer edited last unless it is done, running or queued
        (the server calls this when the worker runs out of jobs: any thread)."""
        with self._lock:
            pause = self._pause
            if pause is None:
                self._prepare_head_locked()
                return
            if pause.job is not None and pause.job.live:
                return
            if pause.tries >= MAX_PREWARM_TRIES:
                self._pause = None
                return
            pause.tries += 1
            pause.job = self.scheduler.submit(
                pause.uri + NEXT_EDIT_KEY,
                lambda cancelled: self._prewarm(pause, cancelled),
                kind="prewarm",
                give_up_s=pause.settings.completion.max_wait_ms / 1000 + GIVE_UP_GRACE_S,
            )

    def _prepare_head_locked(self) -> None:
        """With no pause to pre-warm: the prompts' common head (the chat family's instructions)
        prefilled once per loaded local model, as a pre-warm job (the lowest priority, any
        request cancels it; at most MAX_HEAD_TRIES starts), so that the first next edit after
        the load does not pay for it."""
        backend = self.host.backend
        if backend is None or isinstance(backend, EngineBackend):
            return
        if self._head_for is None or self._head_for() is not backend:
            self._head_for, self._head_tries, self._head_done = weakref.ref(backend), 0, False
        if self._head_done or self._head_tries >= MAX_HEAD_TRIES:
            return
        if self._head_job is not None and self._head_job.live:
            return
        settings = self._settings()
        if not (settings.enable and settings.next_edit.prewarm and settings.completion.speculative):
            return
        self._head_tries += 1
        local = cast("LocalBackend", backend)  # neither None nor an engine: the local model
        self._head_job = self.scheduler.submit(
            HEAD_KEY,
            lambda cancelled: self._prepare_head(local, settings, cancelled),
            kind="prewarm",
            give_up_s=settings.completion.max_wait_ms / 1000 + GIVE_UP_GRACE_S,
        )

    def _prepare_head(
        self, backend: LocalBackend, settings: Settings, cancelled: Callable[[], bool]
    ) -> int | None:
        """On the worker: prefill the prompts' common head of the loaded model (the request
        only names the prompt family: the head does not depend on the buffer)."""
        if cancelled() or self.host.backend is not backend:
            return None
        editor = self.editor(backend)
        request = NextEditRequest(
            text="", cursor_line=0, prompt_format=settings.next_edit.prompt_format
        )
        try:
            tokens = editor.prepare_head(request, cancelled=cancelled)
        except Exception as err:  # the model failed: the first request prefills it, or says
            self._head_finished(backend)
            log.error("next-edit head prefill failed (%s: %s)", type(err).__name__, err)
            log.debug("next-edit head prefill failure", exc_info=True)
            return None
        if not cancelled():
            self._head_finished(backend)  # prefilled, or the family has no common head
            self.stats.count("nextEditHeadTokens", tokens)
        log.debug("next-edit prompt head prefilled: %d tokens", tokens)
        return tokens

    def _head_finished(self, backend: LocalBackend) -> None:
        with self._lock:
            if self._head_for is not None and self._head_for() is backend:
                self._head_done = True

    def _end_pause(self, uri: str, pause: Pause | None = None) -> None:
        """No more pre-warm for this buffer's pause (`pause`: only if it is still that one)."""
        with self._lock:
            current = self._pause
            if current is not None and current.uri == uri and pause in (None, current):
                self._pause = None

    def _prewarm(self, pause: Pause, cancelled: Callable[[], bool]) -> dict[str, Any] | None:
        """On the worker: prefill the pause's prompt (nothing when a follow-up answers it or the
        model is not the local one). Preempted (a newer edit, a request, another job due), the
        part done stays in the cache and `idle` starts it again; else the pause is done."""

        def preempted() -> bool:
            return cancelled() or self._pause is not pause or self.scheduler.waiting()

        backend = self.host.backend
        if preempted():
            return None
        request = pause.request
        if backend is None or isinstance(backend, EngineBackend) or follow_up(request):
            self._end_pause(pause.uri, pause)
            return None
        editor = self.editor(backend)
        try:
            done = editor.prewarm(request, cancelled=preempted)
        except Exception as err:  # the model failed: no pre-warm, the request will say
            editor.forget(request.buffer_id or "")
            self._end_pause(pause.uri, pause)
            log.error("next-edit pre-warm failed (%s: %s)", type(err).__name__, err)
            log.debug("next-edit pre-warm failure", exc_info=True)
            return None
        log.debug("next-edit prewarm: %s", done)
        self.stats.count("nextEditPrewarms")
        self.stats.count("nextEditPrewarmedTokens", done["prefilledTokens"])
        if not (done["cancelled"] and preempted()):  # done, or out of time
            self._end_pause(pause.uri, pause)
        return done

    def _run(self, request: NextEditRequest, cancelled: Callable[[], bool]) -> NextEdit | str:
        """On the worker: the prediction, or why there is none."""
        backend = self.host.backend
        if backend is None:
            return f"the model is not ready ({self.host.message or self.host.state})"
        self.stats.count("nextEditModelCalls")
        if isinstance(backend, EngineBackend):
            try:
                return self.remote_editor(backend).predict(request, cancelled=cancelled)
            except Exception as err:  # a bug on our side: answer empty, keep serving
                log.error("next edit through the engine failed (%s: %s)", type(err).__name__, err)
                log.debug("next edit failure", exc_info=True)
                return f"engine error: {type(err).__name__}: {err}"
        editor = self.editor(backend)
        try:
            result = editor.predict(request, cancelled=cancelled)
            stats = result.stats
            self.stats.count("nextEditReusedTokens", stats.get("reusedPromptTokens", 0))
            self.stats.count("nextEditReusedPrewarmedTokens", stats.get("prewarmedTokens", 0))
            return result
        except Exception as err:  # the model failed: answer empty, keep serving
            editor.forget(request.buffer_id or "")
            log.error("next edit failed (%s: %s)", type(err).__name__, err)
            log.debug("next edit failure", exc_info=True)
            return f"model error: {type(err).__name__}: {err}"

    async def predict(self, doc: TextDocument | None, position: types.Position) -> dict[str, Any]:
        started = time.perf_counter()
        settings = self._settings()
        self.stats.count("nextEditRequests")
        index = LineIndex.of(doc.source) if doc is not None else None
        answer = await self._predict(doc, index, position, settings)
        return {**answer, "latencyMs": round((time.perf_counter() - started) * 1000, 1)}

    async def _predict(
        self,
        doc: TextDocument | None,
        index: LineIndex | None,
        position: types.Position,
        settings: Settings,
    ) -> dict[str, Any]:
        if doc is None or index is None:
            return empty(UNKNOWN_DOCUMENT)
        if not settings.enable:
            return empty(DISABLED)
        if doc.language_id and not settings.language_enabled(doc.language_id):
            return empty(f"completions are disabled for language '{doc.language_id}'")
        edits = tuple(self.history.recent(doc.uri))
        if not edits:
            return empty(NO_EDITS)
        codec = doc.position_codec
        cursor = index.offset_at(codec, position)
        line = index.position_at(codec, cursor).line
        request = request_of(doc, index.text, line, cursor, edits, settings)
        found = follow_up(request)
        if found is not None:  # a follow-up of the last edit: no model needed
            self.stats.count(found[1])
            return answer_of(index, codec, found[0])
        self._end_pause(doc.uri)  # the request takes over from the pre-warm (it cancels it)
        self.host.ensure(settings.model)  # a load is queued first: the job runs after it
        version = doc.version
        job = self.scheduler.submit(
            doc.uri + NEXT_EDIT_KEY,
            lambda cancelled: self._run(request, cancelled),
            give_up_s=settings.completion.max_wait_ms / 1000 + GIVE_UP_GRACE_S,
        )
        try:
            result = await asyncio.wrap_future(job.future)
        except asyncio.CancelledError:
            job.release()
            raise
        except JobAbandoned as err:
            return empty(str(err))
        if result is None:
            return empty("superseded by a newer request")
        if isinstance(result, str):
            return empty(result)
        if doc.version != version:
            return empty("the document changed meanwhile")
        return answer_of(index, codec, result)


def request_of(
    doc: TextDocument,
    text: str,
    cursor_line: int,
    cursor: int,
    edits: tuple[Edit, ...],
    settings: Settings,
) -> NextEditRequest:
    """The prediction asked for in `doc` (its text `text`) at this cursor."""
    return NextEditRequest(
        text=text,
        cursor_line=cursor_line,
        cursor=cursor,
        edits=edits,
        path=doc.path if doc.uri.startswith("file:") else None,
        language_id=doc.language_id,
        max_wait_ms=settings.completion.max_wait_ms,
        plain=not settings.completion.speculative,
        buffer_id=doc.uri + NEXT_EDIT_KEY,
        prompt_format=settings.next_edit.prompt_format,
    )


def follow_up(request: NextEditRequest) -> tuple[NextEdit, str] | None:
    """The first follow-up that answers the request (no model), with its counter."""
    for find, counter in FOLLOW_UPS:
        found = find(request)
        if found is not None:
            return found, counter
    return None


def answer_of(index: LineIndex, codec: Any, result: NextEdit) -> dict[str, Any]:
    """The result JSON of a prediction: a model's rewrite (its window, model and stats) or a
    rename or call-site follow-up (no window, no model)."""
    by_model = result.source == "model"
    return {
        "edits": [
            {"range": lsp_range(index, codec, hunk.start, hunk.end), "newText": hunk.new_text}
            for hunk in result.hunks
        ],
        "window": lsp_range(index, codec, result.window_start, result.window_end)
        if by_model
        else None,
        "reason": result.reason,
        "source": result.source,
        "model": result.model if by_model else None,
        "stats": result.describe(),
    }


def lsp_range(index: LineIndex, codec: Any, start: int, end: int) -> dict[str, Any]:
    return {
        "start": position_json(index.position_at(codec, start)),
        "end": position_json(index.position_at(codec, end)),
    }


def position_json(position: types.Position) -> dict[str, int]:
    return {"line": position.line, "character": position.character}


def empty(reason: str) -> dict[str, Any]:
    return {"edits": [], "window": None, "reason": reason, "source": None}
