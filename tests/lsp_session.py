"""Start the real server over stdio with pytest-lsp's client, and small helpers for the tests."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, "-m", "memosight_lsp"]


def plain(value: Any) -> Any:
    """pygls hands custom results over as namedtuple-like Objects; make them dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def client_factory() -> LanguageClient:
    client = make_test_lsp_client()
    client.statuses = []  # type: ignore[attr-defined]
    client.updates = []  # type: ignore[attr-defined]

    @client.feature("memosight/status")
    def status(params: Any) -> None:
        client.statuses.append(plain(params))  # type: ignore[attr-defined]

    @client.feature("memosight/completionUpdated")
    def updated(params: Any) -> None:
        client.updates.append(plain(params))  # type: ignore[attr-defined]

    return client


async def start(
    editor: str = "neovim",
    init_options: dict | None = None,
    *,
    initialized: bool = True,
    configuration: dict | None = None,
    root: Path = ROOT,
    env: dict[str, str] | None = None,
) -> LanguageClient:
    # The server indexes the workspace folder; its cache goes to a temporary folder by default.
    cache = str(Path(tempfile.gettempdir()) / "memosight-test-cache")
    env = {**os.environ, "XDG_CACHE_HOME": cache, **(env or {}), "PYTHONPATH": str(ROOT)}
    config = ClientServerConfig(
        server_command=SERVER, client_factory=client_factory, server_env=env
    )
    client = await config.start()
    if configuration is not None:
        client.set_configuration(configuration)
    params = types.InitializeParams(
        capabilities=client_capabilities(editor),
        initialization_options=init_options,
        workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="root")],
    )
    if initialized:
        client.init_result = await client.initialize_session(params)  # type: ignore[attr-defined]
    else:
        client.capabilities = params.capabilities
        params.process_id = os.getpid()
        client.init_result = await client.initialize_async(params)  # type: ignore[attr-defined]
    return client


async def stop(client: LanguageClient) -> None:
    try:
        await asyncio.wait_for(client.shutdown_session(), 10)
    finally:
        await client.stop()


def tiny_options(model_dir: Path, **completion: Any) -> dict:
    """Settings for a tiny model. These tests check whole suggestions, so they wait for them
    (firstResponseMs 0: no first-response deadline on a loaded machine; tests/test_latency.py
    tests the deadline)."""
    return {
        "model": {"path": str(model_dir)},
        "completion": {"maxNewTokens": 8, "firstResponseMs": 0, **completion},
    }


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python") -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id=language, version=1, text=text
            )
        )
    )


def edit(
    client: LanguageClient,
    uri: str,
    version: int,
    start: tuple[int, int],
    end: tuple[int, int],
    text: str,
) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(*start), end=types.Position(*end)),
                    text=text,
                )
            ],
        )
    )


def after_insert(line: int, character: int, text: str) -> tuple[int, int]:
    """The cursor after inserting text at (line, character) (ASCII text)."""
    rows = text.split("\n")
    if len(rows) == 1:
        return line, character + len(text)
    return line + len(rows) - 1, len(rows[-1])


def inline_params(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(
            trigger_kind=types.InlineCompletionTriggerKind.Automatic
        ),
    )


async def inline(client: LanguageClient, uri: str, line: int, character: int) -> str | None:
    result = await asyncio.wait_for(
        client.text_document_inline_completion_async(inline_params(uri, line, character)), 60
    )
    if result is None:
        return None
    items = result.items if isinstance(result, types.InlineCompletionList) else result
    return items[0].insert_text if items else None


async def stats(client: LanguageClient) -> dict:
    return plain(await client.protocol.send_request_async("memosight/stats", {}))


async def context(client: LanguageClient, uri: str, line: int, character: int) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
    return plain(await client.protocol.send_request_async("memosight/context", params))


async def wait_until(predicate, timeout: float = 60.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def wait_for_state(client: LanguageClient, state: str, timeout: float = 60.0) -> dict:
    statuses = client.statuses  # type: ignore[attr-defined]
    await wait_until(lambda: any(s["state"] == state for s in statuses), timeout)
    return next(s for s in statuses if s["state"] == state)


def send_raw(client: LanguageClient, body: bytes) -> None:
    """Write one message body as-is (to send what a well-behaved client never would)."""
    header = f"Content-Length: {len(body)}\r\n\r\n".encode("ascii")
    client.protocol.writer.write(header + body)


async def raw_request(client: LanguageClient, method: str, params: Any, timeout: float = 10):
    """A request whose params skip the client's type checks; returns the result or raises."""
    msg_id = f"raw-{time.monotonic_ns()}"
    future: asyncio.Future = asyncio.get_running_loop().create_future()
    client.protocol._request_futures[msg_id] = future
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
    send_raw(client, json.dumps(body).encode())
    return await asyncio.wait_for(future, timeout)
