"""A language server as a subprocess, spoken to in JSON-RPC over stdio: the one LSP client of
the benchmarks that drive a real server, the reliability tools (tools/reliability/) and the
tests. Plain json and a reader thread, no LSP library: only server/ imports those.

A thread reads the server's stdout with a strict framing parser: anything on stdout that is not
a well-formed frame holding a JSON object is counted in `bad_output` (stdout is the protocol).
Requests from the server (workspace/configuration, window/workDoneProgress/create) are answered
by `answer_server_request`, which callers may replace; notifications go to `handlers` by method.
Requests are synchronous (`request`, for threads) or awaitable (`send_request`, `call`, for
asyncio), and `write` sends raw bytes, for what a well-behaved client never would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

SERVER_COMMAND = (sys.executable, "-m", "memosight_lsp")


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def encode(message: Any) -> bytes:
    return frame(json.dumps(message).encode())


# The error code of a request the client cancelled ($/cancelRequest), as LSP defines it.
REQUEST_CANCELLED = -32800


class ResponseError(Exception):
    """An error response to a request: its code and message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class StdioServer:
    """The server process and the client's end of its stdin and stdout."""

    def __init__(
        self,
        command: Sequence[str] = SERVER_COMMAND,
        *,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        stderr: IO[bytes] | int | str | None = subprocess.DEVNULL,
    ) -> None:
        """stderr: a file, DEVNULL, or "collect" to keep the server's log lines in `log`."""
        collect = stderr == "collect"
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if collect else stderr,  # type: ignore[arg-type]
            env=env,
            cwd=cwd,
        )
        self.log: list[str] = []
        if collect:
            threading.Thread(target=self._read_log, name="stdio-log", daemon=True).start()
        self.responses: dict[Any, dict] = {}
        self.received_at: dict[Any, float] = {}  # id -> time.monotonic() of its response
        self.null_id_errors: list[dict] = []  # error responses with id null (parse errors...)
        self.notifications: Counter[str] = Counter()
        self.statuses: list[dict] = []  # memosight/status params
        self.server_requests: Counter[str] = Counter()
        self.bad_output: list[str] = []
        self.write_lock = threading.Lock()
        self.cond = threading.Condition()
        self.answer_server_request: Callable[[dict], Any] = default_answer
        # method -> called with the params of each notification from the server (reader thread)
        self.handlers: dict[str, Callable[[Any], None]] = {}
        self._ids = itertools.count(1)
        self._futures: dict[Any, tuple[asyncio.AbstractEventLoop, asyncio.Future]] = {}
        self._reader = threading.Thread(target=self._read, name="stdio-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- writing --------------------------------------------------------------------------------
    def write(self, data: bytes) -> bool:
        """Write raw bytes; False when the server's stdin is closed (it died)."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            with self.write_lock:
                stdin.write(data)
                stdin.flush()
            return True
        except (BrokenPipeError, ValueError, OSError):
            return False

    def send(self, message: Any) -> bool:
        return self.write(encode(message))

    def notify(self, method: str, params: Any = None) -> bool:
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(
        self, msg_id: Any, method: str, params: Any = None, timeout: float | None = 10.0
    ) -> dict | None:
        """Send a request and wait for its response (None: no answer in time, or it died)."""
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.wait_for(msg_id, timeout)

    def wait_for(self, msg_id: Any, timeout: float | None = 10.0) -> dict | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while msg_id not in self.responses:
                if not self.alive() and not self._reader.is_alive():
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.cond.wait(0.2 if left is None else min(left, 0.2))
            return self.responses[msg_id]

    def next_id(self) -> int:
        """A request id no other request of this client has."""
        return next(self._ids)

    def send_request(
        self, method: str, params: Any = None, msg_id: Any = None
    ) -> asyncio.Future[Any]:
        """Send a request from a running event loop: a future of its result, which raises
        ResponseError on an error response and ConnectionError when the server is gone."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        msg_id = self.next_id() if msg_id is None else msg_id
        with self.cond:
            self._futures[msg_id] = (loop, future)
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        if not self.send(message) or not self._reader.is_alive():
            with self.cond:
                self._futures.pop(msg_id, None)
            future.set_exception(ConnectionError(f"the server is gone ({method})"))
        return future

    async def call(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        """The result of a request (see send_request)."""
        return await asyncio.wait_for(self.send_request(method, params), timeout)

    async def initialize(
        self, options: Any, folders: Sequence[Path] = (), capabilities: dict | None = None
    ) -> Any:
        """initialize, then initialized: the server's capabilities."""
        result = await self.call(
            "initialize",
            {
                "processId": None,
                "capabilities": capabilities or {},
                "initializationOptions": options,
                "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders] or None,
            },
        )
        self.notify("initialized", {})
        return result

    async def shutdown(self, timeout: float = 10.0) -> int | None:
        """stop() off the event loop."""
        return await asyncio.to_thread(self.stop, timeout)

    def close_stdin(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass

    def stop(self, timeout: float = 10.0) -> int | None:
        """shutdown + exit; kill when it does not leave in time. Returns the exit code."""
        if self.alive():
            self.request("__shutdown__", "shutdown", None, timeout)
            self.notify("exit")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.close_stdin()

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        self.close_stdin()

    # -- reading --------------------------------------------------------------------------------
    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.decode("utf-8", "replace").rstrip("\n"))

    def log_lines(self, text: str) -> list[str]:
        """The server's log lines so far that contain `text`."""
        return [line for line in list(self.log) if text in line]

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.cond.notify_all()
                        pending, self._futures = self._futures, {}
                    for loop, future in pending.values():
                        _settle(loop, future, error=ConnectionError("the server is gone"))
                    return
                if line == b"\r\n":
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length" and value.strip().isdigit():
                    length = int(value)
                elif name.lower() != "content-type":
                    self.bad_output.append(f"unexpected header line {line[:80]!r}")
            if length is None:
                self.bad_output.append("a frame without Content-Length")
                continue
            body = out.read(length)
            try:
                message = json.loads(body)
                if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                    raise ValueError("not a JSON-RPC 2.0 object")
            except ValueError as err:
                self.bad_output.append(f"invalid body ({err}): {body[:80]!r}")
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict) -> None:
        method = message.get("method")
        if method is not None and "id" in message:
            self.server_requests[method] += 1
            reply = self.answer_server_request(message)
            if reply is not None:
                self.send(reply)
            return
        if method is not None:
            self.notifications[method] += 1
            if method == "memosight/status" and isinstance(message.get("params"), dict):
                self.statuses.append(message["params"])
            handler = self.handlers.get(method)
            if handler is not None:
                handler(message.get("params"))
            return
        msg_id = message.get("id")
        if isinstance(msg_id, bool) or not isinstance(msg_id, int | str | None):
            self.bad_output.append(f"a response with an invalid id: {str(message)[:80]}")
            return
        with self.cond:
            if msg_id is None:
                self.null_id_errors.append(message)
            else:
                self.received_at[msg_id] = time.monotonic()
                self.responses[msg_id] = message
            waiter = self._futures.pop(msg_id, None)
            self.cond.notify_all()
        if waiter is not None:
            error = message.get("error")
            if isinstance(error, dict):
                code, text = error.get("code"), error.get("message")
                _settle(*waiter, error=ResponseError(int(code or 0), str(text)))
            else:
                _settle(*waiter, result=message.get("result"))


def _settle(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future,
    result: Any = None,
    error: BaseException | None = None,
) -> None:
    """Complete a future of another thread's loop (unless it was cancelled or the loop ended)."""

    def done() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(done)


def default_answer(request: dict) -> dict:
    """A plain client's answers: an empty settings section, yes to progress tokens."""
    result: Any = None
    if request.get("method") == "workspace/configuration":
        items = (request.get("params") or {}).get("items") or []
        result = [None for _ in items]
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def with_settings(options: dict[str, Any], settings: str | None) -> dict[str, Any]:
    """`options` with `--settings` (a JSON object of sections) merged over it, section by
    section: a section given as an object adds to the one there."""
    merged = dict(options)
    for section, values in json.loads(settings or "{}").items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section] = {**merged[section], **values}
        else:
            merged[section] = values
    return merged


def inline_params(uri: str, line: int, character: int) -> dict[str, Any]:
    """textDocument/inlineCompletion params as an editor sends them while the user types."""
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},  # InlineCompletionTriggerKind.Automatic
    }


def insertion(uri: str, version: int, line: int, character: int, text: str) -> dict[str, Any]:
    """textDocument/didChange params inserting `text` at (line, character)."""
    at = {"line": line, "character": character}
    return {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": at, "end": at}, "text": text}],
    }


def first_text(result: Any) -> str | None:
    """What the first item of an inline completion result (a list or {"items": [...]}) adds at
    the cursor."""
    items = result.get("items") if isinstance(result, dict) else result
    if not items:
        return None
    return added_text(items[0])


def added_text(item: dict[str, Any]) -> str | None:
    """What an inline completion item adds at the cursor. The server's item for a one-line
    suggestion before code on the cursor's line replaces that code with the suggestion followed
    by it (server/features.inline_item): its text ends with what its range covers, counted in
    UTF-16 units (the encoding these clients get: they ask for none). An item that writes a
    line through that code (`t *testing.T) {` over `)`) is not an insertion, and this cannot
    tell it from one without the document; it comes back shortened by the code it keeps. The
    benches that read items this way put their cursors where nothing follows on the line (a
    replayed function is typed line by line, `bench startup` cuts its line at the cursor),
    or only report what showed (`bench startup --file`)."""
    text = item.get("insertText")
    if not isinstance(text, str):
        return None
    span = item.get("range") or {}
    start, end = span.get("start") or {}, span.get("end") or {}
    width = end.get("character", 0) - start.get("character", 0)
    if start.get("line") != end.get("line") or width <= 0:
        return text
    units = text.encode("utf-16-le")
    return units[: max(0, len(units) - 2 * width)].decode("utf-16-le", errors="ignore")
