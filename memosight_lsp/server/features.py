"""LSP handlers. Each one: find the document, call the server state, map to LSP types."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from .completions import Outcome
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

    @server.feature(types.INITIALIZED)
    async def initialized(ls: MemoSightServer, params: types.InitializedParams) -> None:
        ls.capture_loop()
        await pull_configuration(ls)
        if ls.settings.enable:
            ls.host.ensure(ls.settings.model)
        ls.send_status(force=True)

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

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MemoSightServer, params: types.DidChangeTextDocumentParams) -> None:
        doc = ls.document(params.text_document.uri)
        if doc is not None:
            ls.flow.document_changed(doc)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: MemoSightServer, params: types.DidSaveTextDocumentParams) -> None:
        log.debug("saved %s", params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemoSightServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.flow.document_closed(params.text_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_folders(
        ls: MemoSightServer, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        log.info("workspace folders: %s", [f.uri for f in ls.workspace.folders.values()])

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: MemoSightServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        ls.capture_loop()
        outcome = await ls.flow.complete(ls.document(params.text_document.uri), params.position)
        if not outcome.text or outcome.position is None:
            return None
        return types.InlineCompletionList(
            items=[
                types.InlineCompletionItem(
                    insert_text=outcome.text,
                    range=types.Range(start=outcome.position, end=outcome.position),
                )
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
        return completion_list(task.result())

    @server.feature("memosight/stats")
    def stats(ls: MemoSightServer, params: Any) -> dict[str, Any]:
        return {
            **ls.stats.snapshot(),
            "state": ls.status()["state"],
            "model": ls.host.model_name,
            "modelMessage": ls.host.message,
            "openDocuments": len(ls.workspace.text_documents),
        }

    @server.feature("memosight/context")
    async def context(ls: MemoSightServer, params: Any) -> dict[str, Any]:
        ls.capture_loop()
        return await explain(ls, plain(params))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: MemoSightServer, params: Any) -> None:
        ls.stop_worker()


async def pull_configuration(ls: MemoSightServer) -> None:
    caps = ls.client_capabilities
    workspace = caps.workspace if caps is not None else None
    if not (workspace and workspace.configuration):
        return
    try:
        result = await asyncio.wait_for(
            ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="memosight")])
            ),
            timeout=5,
        )
    except Exception as err:
        log.warning("workspace/configuration failed: %s", err)
        return
    if result and isinstance(result[0], dict) and result[0]:
        ls.apply_settings(result[0], "workspace/configuration")


def completion_list(outcome: Outcome) -> types.CompletionList:
    if not outcome.text or outcome.position is None:
        return types.CompletionList(is_incomplete=True, items=[])
    first = next((line for line in outcome.text.split("\n") if line.strip()), outcome.text)
    label = first.strip()
    if len(label) > LABEL_CHARS:
        label = label[: LABEL_CHARS - 1] + "…"
    cursor = types.Range(start=outcome.position, end=outcome.position)
    item = types.CompletionItem(
        label=label,
        kind=types.CompletionItemKind.Snippet,
        detail="MemoSight",
        documentation=types.MarkupContent(kind=types.MarkupKind.PlainText, value=outcome.text),
        text_edit=types.TextEdit(range=cursor, new_text=outcome.text),
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
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (line, character)
    ):
        raise JsonRpcInvalidParams("uri must be a string, line and character whole numbers >= 0")
    return uri, types.Position(line=line, character=character)


async def explain(ls: MemoSightServer, params: Any) -> dict[str, Any]:
    """memosight/context: the prompt the model would see here, and why there'd be nothing."""
    uri, position = position_param(params)
    budget = params.get("budget") if isinstance(params, dict) else None
    doc = ls.document(uri)
    empty: dict[str, Any] = {"promptTokens": 0, "snippets": [], "prompt": "", "reason": None}
    if doc is None:
        return {**empty, "reason": "unknown document: it was never opened with didOpen"}
    settings = ls.settings
    cursor = ls.flow.cursor(doc, position)
    reason = ls.flow.explain(cursor, settings)
    if settings.enable:
        ls.host.ensure(settings.model)
    if ls.host.state == "error":
        return {**empty, "reason": reason or f"model error: {ls.host.message}"}
    _, request = ls.flow.request_for(cursor.text, cursor.offset, cursor, settings)
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        request = type(request)(**{**request.__dict__, "budget_tokens": budget})

    def prepare(cancelled) -> dict[str, Any] | None:
        engine = ls.host.engine
        if engine is None:
            return None
        prompt = engine.prepare(request)
        return {
            "prompt": prompt.text,
            "promptTokens": engine.count_tokens(prompt.text),
            "prefix": prompt.context.prefix,
            "suffix": prompt.context.suffix,
            "prefixTokens": engine.count_tokens(prompt.context.prefix),
            "suffixTokens": engine.count_tokens(prompt.context.suffix),
        }

    job = ls.scheduler.submit(f"{uri}#context", prepare)
    try:
        prepared = await asyncio.wrap_future(job.future)
    except asyncio.CancelledError:
        job.release()
        raise
    if prepared is None:
        return {**empty, "reason": reason or f"model not ready: {ls.host.message}"}
    index = ls.flow.line_index(doc)
    codec = doc.position_codec

    def at(offset: int) -> dict[str, int]:
        pos = index.position_at(codec, offset)
        return {"line": pos.line, "character": pos.character}

    offset = cursor.offset
    snippets = [
        {
            "uri": uri,
            "range": {"start": at(offset - len(prepared["prefix"])), "end": at(offset)},
            "symbol": None,
            "kind": "prefix",
            "tokens": prepared["prefixTokens"],
        },
        {
            "uri": uri,
            "range": {"start": at(offset), "end": at(offset + len(prepared["suffix"]))},
            "symbol": None,
            "kind": "suffix",
            "tokens": prepared["suffixTokens"],
        },
    ]
    return {
        "promptTokens": prepared["promptTokens"],
        "snippets": snippets,
        "prompt": prepared["prompt"],
        "reason": reason,
    }
