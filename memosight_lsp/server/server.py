"""The language server object: settings, the model worker, caches and stats live here.

Handlers (features.py) stay thin and call into this state. Work from the model thread reaches the
client through `call_soon_threadsafe`, never directly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from memosight_lsp import __version__
from memosight_lsp.config import Settings, parse_settings, unwrap_settings, without_user_only
from memosight_lsp.inference.memory import release_free_memory
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.pipeline.request import Completion
from memosight_lsp.session.completion_flow import DISABLED, CompletionFlow, ContextInputs, Cursor
from memosight_lsp.session.model_host import KeptModel, ModelHost, ModelState
from memosight_lsp.session.next_edit_flow import NextEditFlow
from memosight_lsp.session.scheduler import Scheduler
from memosight_lsp.session.stats import ServerStats
from memosight_lsp.workspace.files import indexable_text

from .indexes import WorkspaceIndexes
from .progress import ProgressChains
from .protocol import RobustProtocol

log = logging.getLogger(__name__)

STATUS_METHOD = "memosight/status"
# An early answer grew once decoding ended: the client asks again where nothing changed.
COMPLETION_UPDATED_METHOD = "memosight/completionUpdated"
MAX_CONTEXT_BUFFERS = 20  # other open buffers offered to the context ranker
SESSION_JOB = "__session__"  # the scheduler's buffer id of a session's last job


def deep_merge(base: dict, update: dict) -> dict:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class MemoSightServer(LanguageServer):
    """One editor's session. `lingers`: the process outlives it (host_process/) and keeps the
    model for the next editor; `kept`: the model a previous session left loaded."""

    def __init__(self, kept: KeptModel | None = None, *, lingers: bool = False) -> None:
        super().__init__(
            "memosight-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=RobustProtocol,
        )
        self.settings = Settings()
        self.shutdown_requested = False  # the exit code depends on it (LSP spec)
        self.raw_settings: dict[str, Any] = {}
        self.stats = ServerStats()
        if kept is None:
            self.scheduler = Scheduler(on_idle=self._worker_idle)
            self.host = ModelHost(self.scheduler, self._model_state_from_worker)
        else:
            self.scheduler, self.host = kept.scheduler, kept.host
            self.scheduler.on_idle = self._worker_idle
            self.host.attach(self._model_state_from_worker)
        self.lingers = lingers or kept is not None
        self._abandoned_before = self.scheduler.abandoned
        # Set by a lingering host: `exit` ends this session's connection, not the process.
        self.end_connection: Callable[[], None] | None = None
        self.flow = CompletionFlow(
            scheduler=self.scheduler,
            host=self.host,
            stats=self.stats,
            settings=lambda: self.settings,
            on_model_result=self._model_result_from_worker,
            context_inputs=self.context_inputs,
            current_version=self._document_version,
            on_longer=self._completion_updated,
        )
        self.edit_history = EditHistory()  # each buffer's recent edits (memosight/nextEdit)
        self.next_edits = NextEditFlow(
            scheduler=self.scheduler,
            host=self.host,
            settings=lambda: self.settings,
            history=self.edit_history,
            stats=self.stats,
        )
        # Scans give way to the model's load and requests (server/scan_priority.py).
        self.indexes = WorkspaceIndexes(
            self._index_progress_from_thread, model_calm=self.scheduler.wait_calm
        )
        self.workspace_roots: list[str] = []  # folders from initialize / didChangeWorkspaceFolders
        self.indexing_started = False  # at `initialized` (or the first didOpen without it)
        self.progress_chains = ProgressChains(self)  # $/progress of the model load and the scans
        self.loop: asyncio.AbstractEventLoop | None = None
        self._shown: set[str] = set()
        self._last_status: dict[str, Any] | None = None

    def _worker_idle(self) -> None:
        """On the model worker when it runs out of jobs: it gives freed memory back, then
        pre-warms the next edit of the buffer edited last (session/next_edit_flow.py)."""
        release_free_memory()
        self.next_edits.idle()

    # -- documents --------------------------------------------------------------------------

    def document(self, uri: str) -> TextDocument | None:
        docs = self.workspace.text_documents
        return docs.get(uri) or docs.get(unquote(uri))

    def _document_version(self, uri: str) -> int | None:
        doc = self.document(uri)
        return doc.version if doc is not None else None

    def _completion_updated(self, cursor: Cursor, text: str) -> None:
        """Tell the client that the suggestion at this cursor grew (on the event loop)."""
        self.protocol.notify(
            COMPLETION_UPDATED_METHOD,
            {
                "textDocument": {"uri": cursor.uri, "version": cursor.version},
                "position": {"line": cursor.position.line, "character": cursor.position.character},
                "text": text,
            },
        )

    # -- workspace context --------------------------------------------------------------------

    def context_inputs(self, cursor: Cursor, settings: Settings) -> ContextInputs:
        """What the context packer gets besides the document: the index of the cursor's folder
        (none when `context.crossFile` is off), the other open buffers and the recent edits."""
        if not settings.context.cross_file:
            return ContextInputs()
        index = self.indexes.index_for(cursor.path)
        if index is None:
            return ContextInputs()
        buffers: dict[str, str] = {}
        for doc in list(self.workspace.text_documents.values()):
            if len(buffers) >= MAX_CONTEXT_BUFFERS:
                break
            if doc.uri == cursor.uri or not doc.uri.startswith("file:"):
                continue
            text = doc.source
            if indexable_text(text):
                buffers[doc.path] = text
        return ContextInputs(
            index=index, open_buffers=buffers, recent_edits=self.indexes.recent_edits()
        )

    def _index_progress_from_thread(
        self, root: Path, phase: str, percent: int | None, message: str
    ) -> None:
        self._on_loop(self._index_progress_on_loop, root, phase, percent, message)

    def _index_progress_on_loop(
        self, root: Path, phase: str, percent: int | None, message: str
    ) -> None:
        """$/progress for a folder's scan: begin, reports with a percentage, end."""
        work = ("index", root)
        if phase == "begin":
            self.progress_chains.begin(
                work,
                "index",
                types.WorkDoneProgressBegin(
                    title="MemoSight index", message=message, percentage=0, cancellable=False
                ),
            )
        elif phase == "end":
            self.progress_chains.end(work, types.WorkDoneProgressEnd(message=message))
        else:
            self.progress_chains.report(
                work, types.WorkDoneProgressReport(message=message, percentage=percent)
            )

    # -- settings ---------------------------------------------------------------------------

    def apply_settings(self, raw: Any, source: str) -> None:
        """Merge a settings update; invalid parts are shown once and fall back to defaults."""
        raw = unwrap_settings(raw)
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.show_once(f"MemoSight: settings from {source} must be an object; ignored")
            return
        if source != "initializationOptions":
            raw, refused = without_user_only(raw, self.settings)
            for name in refused:
                self.show_once(
                    f"MemoSight: {name} is honoured from your user settings only; "
                    f"ignored from {source}",
                    types.MessageType.Warning,
                )
        self.raw_settings = deep_merge(self.raw_settings, raw)
        settings, problems = parse_settings(self.raw_settings)
        if problems:
            self.show_once(
                "MemoSight: invalid settings, defaults used for: " + "; ".join(problems),
                types.MessageType.Warning,
            )
        if settings != self.settings:
            log.info("settings changed (%s)", source)
            self.settings = settings
            self.flow.settings_changed()
        self.send_status()
        if settings.enable and self.host.state != "idle":
            self.host.ensure(settings.model)  # reload when the model settings changed

    # -- messages ---------------------------------------------------------------------------

    def show_once(self, message: str, kind: types.MessageType = types.MessageType.Error) -> None:
        if message in self._shown:
            return
        self._shown.add(message)
        log.warning("%s", message)
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def log_user(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def report_server_error(self, error: Exception, source: Any) -> None:
        # pygls shows every out-of-band error in a popup; a log line is enough (and no spam).
        # Request errors already went back in the response.
        if getattr(source, "__name__", "") == "FeatureRequestError":
            log.info("request failed: %s", error)
            return
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        try:
            self.log_user(f"MemoSight: {error}", types.MessageType.Error)
        except Exception:  # the transport may be gone
            log.debug("could not send the error to the client", exc_info=True)

    def status(self) -> dict[str, Any]:
        if not self.settings.enable:
            state, message = "disabled", DISABLED
        elif self.host.state == "idle":
            state, message = "loading", "the model loads at the first completion"
        else:
            state, message = self.host.state, self.host.message
        return {
            "state": state,
            "message": message,
            "model": self.host.model_name,
            "lastLatencyMs": self.stats.last_latency_ms,
            # Whenever the embedded model serves: "embedded fallback: no code model found" (or
            # why else), and the one action that gives a real code model (discovery/resolve.py).
            "notice": self.host.notice,
            "fix": self.host.fix,
        }

    def send_status(self, *, force: bool = False) -> None:
        status = self.status()
        if not force and status == self._last_status:
            return
        self._last_status = status
        self.protocol.notify(STATUS_METHOD, status)

    # -- worker -> event loop ---------------------------------------------------------------

    def capture_loop(self) -> None:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()

    def _on_loop(self, fn, *args) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)

    def _model_state_from_worker(self, state: ModelState, message: str, name: str | None):
        self._on_loop(self._model_state_changed, state, message)

    def _model_result_from_worker(self, completion: Completion) -> None:
        self._on_loop(self.send_status)

    def _model_state_changed(self, state: ModelState, message: str) -> None:
        if state == "loading" and self.progress_chains.is_open("model"):
            # A step of the load under way (converting a GGUF file, measuring precisions).
            self.progress_chains.report("model", types.WorkDoneProgressReport(message=message))
        elif state == "loading":
            self.progress_chains.begin(
                "model", "load", types.WorkDoneProgressBegin(title="MemoSight", message=message)
            )
        else:
            self.progress_chains.end("model", types.WorkDoneProgressEnd(message=message))
        if state == "error":
            self.show_once(f"MemoSight: {message}")
        elif state == "ready":
            self.log_user(f"MemoSight: {message}")
            if self.host.notice:
                self.log_user(f"MemoSight: {self.host.notice}; {self.host.fix}")
        self.send_status()

    def stop_worker(self) -> None:
        """The session ends (shutdown, exit, the client gone): the model's work and the folder
        watchers stop. A lingering process keeps the model, its worker and what the model keeps
        per buffer (KV caches, checked token by token) for the next editor; what was packed
        from this session's workspace index goes, on the worker that uses it."""
        if self.lingers:
            self.scheduler.on_idle = release_free_memory  # no pre-warm for a buffer gone
            self.scheduler.cancel_all()
            backend = self.host.backend
            if backend is not None:
                self.scheduler.submit(
                    SESSION_JOB, lambda cancelled: backend.session_ended(), kind="control"
                )
        else:
            self.scheduler.stop()
        self.indexes.stop()

    def kept_model(self) -> KeptModel | None:
        """What the next session may take over: the model (loaded, or loading on the worker)
        when the worker never had to abandon a job in this session; else None, and the next
        editor starts a fresh process: a restart is what a user does to get out of trouble."""
        healthy = not self.scheduler.wedged and self.scheduler.abandoned == self._abandoned_before
        return KeptModel(self.scheduler, self.host) if healthy else None
