"""The real server over stdio for the tests, driven two ways:

- `start()` ... `stop()`: pytest-lsp's typed client, replaying a real editor's capabilities
  (`client_capabilities("neovim")`), for async tests that check what the LSP types say;
- `Session`: memosight_lsp/bench/lsp_client.py, the one JSON-RPC client the benchmarks and the
  reliability tools (tools/reliability/) use, synchronous, for tests that send raw bytes, read
  the server's log or start another server command (FAULT_SERVER).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp.client import make_test_lsp_client

from memosight_lsp.bench.lsp_client import SERVER_COMMAND, StdioServer
from memosight_lsp.server.features import plain
from tools.reliability.procs import python_env

ROOT = Path(__file__).resolve().parent.parent
SERVER = list(SERVER_COMMAND)
FAULT_SERVER = (sys.executable, str(ROOT / "tests" / "fault_server.py"))


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


async def next_edit(client: LanguageClient, uri: str, line: int, character: int) -> dict:
    """memosight/nextEdit at a position, as plain JSON."""
    params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
    return plain(await client.protocol.send_request_async("memosight/nextEdit", params))


def in_document(position: dict, lines: list[str]) -> bool:
    """Whether an LSP position {line, character} lies in a document of these lines."""
    line, character = position["line"], position["character"]
    return 0 <= line < len(lines) + 1 and 0 <= character <= len([*lines, ""][line])


# A buffer where `[]` becomes `list()` typed key by key: an edit that is no rename, so the
# model's (or engine's) rewrite answers memosight/nextEdit.
NEXT_EDIT_DOC = (
    "def scale(values, factor):\n"
    "    result = []\n"
    "    for value in values:\n"
    "        result.append(value * factor)\n"
    "    return result\n"
)
NEXT_EDIT_TYPED = NEXT_EDIT_DOC.replace("    result = []", "    result = list()")


async def next_edit_after_typing(
    client: LanguageClient, uri: str, timeout: float
) -> tuple[dict, float]:
    """NEXT_EDIT_DOC opened, `list()` typed over `[]` key by key, then memosight/nextEdit at the
    end of it: the answer and the seconds it took."""
    open_doc(client, uri, NEXT_EDIT_DOC)
    edit(client, uri, 2, (1, 13), (1, 15), "")
    for i, char in enumerate("list()"):
        edit(client, uri, 3 + i, (1, 13 + i), (1, 13 + i), char)
    started = time.monotonic()
    answer = await asyncio.wait_for(next_edit(client, uri, 1, 19), timeout)
    return answer, time.monotonic() - started


def assert_well_formed_next_edit(answer: dict, text: str) -> None:
    """The window and every edit lie in the document, ranges in order; edits or a reason."""
    lines = text.split("\n")
    assert in_document(answer["window"]["start"], lines)
    assert in_document(answer["window"]["end"], lines)
    for proposal in answer["edits"]:
        assert isinstance(proposal["newText"], str)
        start, end = proposal["range"]["start"], proposal["range"]["end"]
        assert in_document(start, lines) and in_document(end, lines)
        assert (start["line"], start["character"]) <= (end["line"], end["character"])
    assert answer["edits"] or answer["reason"]


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


class Session:
    """The real server through the shared JSON-RPC client, synchronously, with the server's log
    lines kept (`session.server.log`)."""

    def __init__(
        self,
        folders: Sequence[Path] = (),
        init_options: dict | None = None,
        *,
        command: Sequence[str] = SERVER_COMMAND,
        env: dict[str, str] | None = None,
        configuration: dict | None = None,
        process_id: int | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.server = StdioServer(command, env=python_env(env), cwd=cwd, stderr="collect")
        if configuration is not None:  # the answer to workspace/configuration
            section = configuration

            def answer(request: dict) -> dict:
                items = (request.get("params") or {}).get("items") or []
                result: Any = [section for _ in items]
                if request.get("method") != "workspace/configuration":
                    result = None
                return {"jsonrpc": "2.0", "id": request["id"], "result": result}

            self.server.answer_server_request = answer
        workspace: dict[str, Any] = {"configuration": configuration is not None}
        init = {
            "processId": process_id,
            "rootUri": folders[0].as_uri() if folders else None,
            "capabilities": {"workspace": workspace, "window": {"workDoneProgress": False}},
            "initializationOptions": init_options,
            "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders] or None,
        }
        self.init_result = self.request("initialize", init, timeout=120)
        self.server.notify("initialized", {})

    def request(self, method: str, params: Any = None, timeout: float = 60) -> Any:
        """The result; raises AssertionError on an error response or no answer in time."""
        msg_id = self.server.next_id()
        answer = self.server.request(msg_id, method, params, timeout)
        assert answer is not None, f"{method} unanswered within {timeout}s"
        assert "error" not in answer, f"{method} failed: {answer['error']}"
        return answer.get("result")

    def open(self, path_or_uri: Path | str, text: str, language: str = "python") -> str:
        uri = path_or_uri.as_uri() if isinstance(path_or_uri, Path) else path_or_uri
        document = {"uri": uri, "languageId": language, "version": 1, "text": text}
        self.server.notify("textDocument/didOpen", {"textDocument": document})
        return uri

    def close(self, uri: str) -> None:
        self.server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def configure(self, settings: dict) -> None:
        self.server.notify("workspace/didChangeConfiguration", {"settings": settings})

    def inline(self, uri: str, line: int, character: int, timeout: float = 60) -> str | None:
        params = {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": character},
            "context": {"triggerKind": 1},
        }
        result = self.request("textDocument/inlineCompletion", params, timeout)
        items = (result or {}).get("items") or []
        return items[0]["insertText"] if items else None

    def context(self, uri: str, line: int, character: int, timeout: float = 60) -> dict:
        params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
        return self.request("memosight/context", params, timeout)

    def stats(self, timeout: float = 10) -> dict:
        return self.request("memosight/stats", {}, timeout)

    def wait_state(self, *states: str, after: int = 0, timeout: float = 120) -> dict:
        """The first memosight/status in one of these states, of those after the first `after`
        (waiting for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for status in list(self.server.statuses)[after:]:
                if status.get("state") in states:
                    return status
            time.sleep(0.05)
        raise AssertionError(f"no status in {states}; saw {self.server.statuses[-3:]}")

    def wait_until(self, predicate, timeout: float = 60, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                indexes = self.index_files() if self.server.alive() else "server gone"
                raise AssertionError(f"{what} not met within {timeout}s (indexes: {indexes})")
            time.sleep(0.1)

    def index_files(self) -> dict[str, int]:
        return {entry["root"]: entry["files"] for entry in self.stats()["indexes"]}

    def stop(self) -> int | None:
        try:
            return self.server.stop()
        finally:
            self.server.kill()


def no_caches() -> dict:
    """Completion settings under which every request runs the model."""
    return {"typeThrough": False, "precomputeNext": False}
