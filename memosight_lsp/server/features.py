"""LSP handlers. Each one: find the document, call the server state, map to LSP types."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from memosight_lsp.config import SECTION
from memosight_lsp.session.completion_flow import Outcome

from .explain import explain
from .indexes import Change
from .server import MemoSightServer

log = logging.getLogger(__name__)

# textDocument/completion must not hold up other servers' popups: it answers from the
# type-through cache at once, else waits this long for the model, else answers empty and
# incomplete (the model keeps going and its result serves the next keystroke from the cache).
FALLBACK_WAIT_S = 0.25
LABEL_CHARS = 60


def register(server: MemoSightServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: MemoSightServer, params: types.InitializeParams) -> None:
        ls.capture_loop()
        ls.apply_settings(params.initialization_options, "initializationOptions")
        ls.workspace_roots = initial_roots(params)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: MemoSightServer, params: types.InitializedParams) -> None:
        ls.capture_loop()
        await pull_configuration(ls)
        if ls.settings.enable:
            ls.host.ensure(ls.settings.model)
        ls.send_status(force=True)
        start_indexing(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(
        ls: MemoSightServer, params: types.DidChangeConfigurationParams
    ) -> None:
        if params.settings:
            ls.apply_settings(params.settings, "didChangeConfiguration")
        else:  # the pull model (VS Code sends null): ask for the section
            await pull_configuration(ls)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MemoSightServer, params: types.DidOpenTextDocumentParams) -> None:
        log.debug("opened %s", params.text_document.uri)
        start_indexing(ls)  # a client that never sent `initialized`
        doc = ls.document(params.text_document.uri)
        if doc is not None:
            ls.indexes.opened(file_path(doc.uri, doc.path), doc.source, doc.language_id)
            ls.edit_history.opened(doc.uri, doc.source)
            ls.flow.prewarm(doc)  # the cursor is unknown: its end (memosight/cursor tells)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MemoSightServer, params: types.DidChangeTextDocumentParams) -> None:
        doc = ls.document(params.text_document.uri)
        if doc is not None:
            ls.flow.document_changed(doc)
            ls.edit_history.changed(doc.uri, doc.source)
            ls.next_edits.edited(doc)  # its prompt is pre-warmed while the user pauses
            changes = [Change(getattr(c, "range", None), c.text) for c in params.content_changes]
            ls.indexes.changed(
                file_path(doc.uri, doc.path),
                changes,
                doc.source,
                doc.language_id,
                doc.position_codec,
            )

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: MemoSightServer, params: types.DidSaveTextDocumentParams) -> None:
        log.debug("saved %s", params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemoSightServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.flow.document_closed(uri)
        ls.edit_history.closed(uri)
        ls.next_edits.forget(uri)
        ls.indexes.closed(file_path(uri, to_fs_path(uri)))

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(
        ls: MemoSightServer, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        roots = {r for r in ls.workspace_roots}
        roots -= {to_fs_path(f.uri) for f in params.event.removed}
        roots |= {to_fs_path(f.uri) for f in params.event.added}
        ls.workspace_roots = sorted(r for r in roots if r)
        log.info("workspace folders: %s", ls.workspace_roots)
        if ls.indexing_started:
            ls.indexes.set_roots(ls.workspace_roots)
            for doc in list(ls.workspace.text_documents.values()):  # buffers of added folders
                ls.indexes.opened(file_path(doc.uri, doc.path), doc.source, doc.language_id)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: MemoSightServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        ls.capture_loop()
        outcome = await ls.flow.complete(ls.document(params.text_document.uri), params.position)
        ls.send_status()  # carries this request's latency (type-through hits included)
        if outcome.source == "abandoned" and outcome.reason:
            ls.log_user(f"MemoSight: {outcome.reason}", types.MessageType.Warning)
        if not outcome.text or outcome.position is None:
            return None
        line = (outcome.position, outcome.line_rest, outcome.line_end)
        return types.InlineCompletionList(
            items=[  # the greedy suggestion first, then the alternatives (completion.alternatives)
                inline_item(outcome.text, *line, holds_rest=outcome.replaces_rest),
                *(inline_item(text, *line) for text in outcome.alternatives),
            ]
        )

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions())
    async def completion(
        ls: MemoSightServer, params: types.CompletionParams
    ) -> types.CompletionList:
        ls.capture_loop()
        task = asyncio.ensure_future(
            ls.flow.complete(ls.document(params.text_document.uri), params.position)
        )
        try:
            done, _ = await asyncio.wait({task}, timeout=FALLBACK_WAIT_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:  # let it finish in the background: it fills the type-through cache
            return types.CompletionList(is_incomplete=True, items=[])
        ls.send_status()
        return completion_list(task.result())

    @server.feature("memosight/cursor")
    def cursor(ls: MemoSightServer, params: Any) -> None:
        """A client's hint that the cursor rests here (a buffer focused, the cursor moved):
        the prompt there is prefilled in the background."""
        try:
            uri, position = position_param(plain(params))
        except JsonRpcInvalidParams as err:
            log.info("memosight/cursor: %s", err)
            return
        doc = ls.document(uri)
        if doc is not None:
            ls.flow.prewarm(doc, position)

    @server.feature("memosight/nextEdit")
    async def next_edit(ls: MemoSightServer, params: Any) -> dict[str, Any]:
        """The edit the user is likely to make next, from the buffer's recent edits."""
        ls.capture_loop()
        uri, position = position_param(plain(params))
        return await ls.next_edits.predict(ls.document(uri), position)

    @server.feature("memosight/stats")
    def stats(ls: MemoSightServer, params: Any) -> dict[str, Any]:
        return {
            **ls.stats.snapshot(),
            "latency": ls.flow.latency_report(),
            "state": ls.status()["state"],
            "model": ls.host.model_name,
            "modelMessage": ls.host.message,
            "modelPrecision": ls.host.precision,
            "openDocuments": len(ls.workspace.text_documents),
            "indexes": ls.indexes.summary(),
            # The process that serves: a model host's when one keeps the model (host_process/).
            "pid": os.getpid(),
            "keepsModel": ls.lingers,
        }

    @server.feature("memosight/context")
    async def context(ls: MemoSightServer, params: Any) -> dict[str, Any]:
        ls.capture_loop()
        uri, position, budget = context_params(plain(params))
        return await explain(ls, uri, ls.document(uri), position, budget)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: MemoSightServer, params: Any) -> None:
        ls.shutdown_requested = True
        ls.stop_worker()
        ls.protocol.cancel_running_handlers()  # type: ignore[attr-defined]

    @server.feature(types.EXIT)
    def exit_now(ls: MemoSightServer, params: Any) -> None:
        # Leave at once: interpreter teardown (torch, the blocked stdin reader thread) takes
        # seconds, and editors kill a server that is slow to exit. Replies are already flushed.
        ls.stop_worker()
        if ls.end_connection is not None:  # a lingering host: this editor's session ends
            ls.end_connection()
            return
        logging.shutdown()
        os._exit(0 if ls.shutdown_requested else 1)


def to_fs_path(uri: str) -> str:
    from memosight_lsp.workspace import to_path

    return str(to_path(uri)) if uri.startswith("file:") else ""


def file_path(uri: str, path: str | None) -> str | None:
    """The file behind a document, None for untitled and other non-file buffers."""
    return path if uri.startswith("file:") and path else None


def initial_roots(params: types.InitializeParams) -> list[str]:
    """Workspace folders from initialize: workspaceFolders, else rootUri, else rootPath."""
    if params.workspace_folders:
        roots = [to_fs_path(f.uri) for f in params.workspace_folders]
    elif params.root_uri:
        roots = [to_fs_path(params.root_uri)]
    else:
        roots = [params.root_path] if params.root_path else []
    return [r for r in roots if r]


def start_indexing(ls: MemoSightServer) -> None:
    if not ls.indexing_started:
        ls.indexing_started = True
        ls.indexes.set_roots(ls.workspace_roots)


async def pull_configuration(ls: MemoSightServer) -> None:
    caps = ls.client_capabilities
    workspace = caps.workspace if caps is not None else None
    if not (workspace and workspace.configuration):
        return
    try:
        result = await asyncio.wait_for(
            ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
            ),
            timeout=5,
        )
    except Exception as err:
        log.warning("workspace/configuration failed: %s", err)
        return
    if result and isinstance(result[0], dict) and result[0]:
        ls.apply_settings(result[0], "workspace/configuration")


def inline_item(
    text: str,
    cursor: types.Position,
    rest: str,
    end: types.Position | None,
    *,
    holds_rest: bool = False,
) -> types.InlineCompletionItem:
    """The item for `text` at the cursor, before `rest`, the line's text after the cursor up to
    its end `end`. A text that holds that rest (`t *testing.T) {` at `func f(|)`: Completion.
    replaces_rest) replaces it. A one-line text before code (`a, b` at `foo(|)`) replaces the
    code with itself followed by it: the same edit as inserting it, in the shape every client
    draws right. Neovim's built-in draws a ranged item over the text after the range's start,
    so an item at the cursor would hide the `)` under `a, b`; VS Code draws only what an item
    adds. Other multi-line texts are insertions: the rest of the line moves to their last line,
    where a drawing over the first line cannot show it."""
    if rest.strip() and end is not None and (holds_rest or "\n" not in text):
        return types.InlineCompletionItem(
            insert_text=text if holds_rest else text + rest,
            range=types.Range(start=cursor, end=end),
        )
    return types.InlineCompletionItem(insert_text=text, range=types.Range(start=cursor, end=cursor))


def completion_list(outcome: Outcome) -> types.CompletionList:
    if not outcome.text or outcome.position is None:
        return types.CompletionList(is_incomplete=True, items=[])
    first = next((line for line in outcome.text.split("\n") if line.strip()), outcome.text)
    label = first.strip()
    if len(label) > LABEL_CHARS:
        label = label[: LABEL_CHARS - 1] + "…"
    end = outcome.line_end if outcome.replaces_rest and outcome.line_end else outcome.position
    edited = types.Range(start=outcome.position, end=end)
    item = types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Snippet,
        detail="MemoSight",
        documentation=types.MarkupContent(kind=types.MarkupKind.PlainText, value=outcome.text),
        text_edit=types.TextEdit(range=edited, new_text=outcome.text),
        insert_text_format=types.InsertTextFormat.PlainText,
        sort_text="\u0000",  # sorts before everything
        filter_text=label,
        preselect=True,
    )
    return types.CompletionList(is_incomplete=True, items=[item])


def plain(value: Any) -> Any:
    """pygls hands custom params over as namedtuple-like Objects; make them dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def position_param(params: Any) -> tuple[str, types.Position]:
    try:
        uri = params["textDocument"]["uri"]
        line = params["position"]["line"]
        character = params["position"]["character"]
    except (KeyError, TypeError) as err:
        raise JsonRpcInvalidParams(
            "expected {textDocument: {uri}, position: {line, character}}"
        ) from err
    if not isinstance(uri, str) or not all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31 for n in (line, character)
    ):
        raise JsonRpcInvalidParams("uri must be a string, line and character numbers in 0..2^31-1")
    return uri, types.Position(line=line, character=character)


def context_params(params: Any) -> tuple[str, types.Position, int | None]:
    """memosight/context's {textDocument, position, budget?}; a budget that is no whole number
    above 0 is ignored."""
    uri, position = position_param(params)
    budget = params.get("budget") if isinstance(params, dict) else None
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        budget = None
    return uri, position, budget
