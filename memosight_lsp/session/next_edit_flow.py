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
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.workspace import TextDocument

from memosight_lsp.config import Settings
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import (
    NextEdit,
    NextEditRequest,
    call_site_follow_up_edit,
    rename_follow_up_edit,
    string_follow_up_edit,
)
from memosight_lsp.next_edit.remote import RemoteNextEditor
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.session.scheduler import JobAbandoned, Scheduler

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
        if self._editor is not None:
            self._editor.forget(uri + NEXT_EDIT_KEY)

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
            return editor.predict(request, cancelled=cancelled)
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
        request = NextEditRequest(
            text=index.text,
            cursor_line=index.position_at(codec, cursor).line,
            cursor=cursor,
            edits=edits,
            path=doc.path if doc.uri.startswith("file:") else None,
            language_id=doc.language_id,
            max_wait_ms=settings.completion.max_wait_ms,
            plain=not settings.completion.speculative,
            buffer_id=doc.uri + NEXT_EDIT_KEY,
            prompt_format=settings.next_edit.prompt_format,
        )
        follow_up = rename_follow_up_edit(request)
        if follow_up is not None:  # the last edit was a rename: no model needed
            self.stats.count("nextEditRenames")
            return answer_of(index, codec, follow_up)
        follow_up = string_follow_up_edit(request)
        if follow_up is not None:  # a string constant changed: its other uses, no model needed
            self.stats.count("nextEditStrings")
            return answer_of(index, codec, follow_up)
        follow_up = call_site_follow_up_edit(request)
        if follow_up is not None:  # a parameter removed: its calls updated, no model needed
            self.stats.count("nextEditCallSites")
            return answer_of(index, codec, follow_up)
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
