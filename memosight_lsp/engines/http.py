"""HTTP for the engine backends: the standard library only, every call bounded and abortable.

A call has a deadline (a `time.monotonic()` value) and a `cancelled()` callable. The socket is
read through `select()` in slices of POLL_S, so a superseded request closes its connection
within POLL_S (the engine sees the client go and stops generating: vLLM and llama.cpp abort a
request whose connection closed) and a slow or silent engine never holds the model worker past
the deadline. http.client still parses the response (status, headers, chunked bodies).

Every failure is an EngineError with a `kind` the caller can act on; a cancelled call raises
Cancelled. Nothing here retries: the caller's backoff decides when to try again.
"""

from __future__ import annotations

import http.client
import io
import json
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

POLL_S = 0.02  # how often a blocked read looks at cancelled() and the deadline
CONNECT_TIMEOUT_S = 2.0  # at most this long to open a connection (also bounds each send)
MAX_LINE = 1 << 20  # one streamed line (an SSE event, an NDJSON object) is never longer
MAX_BODY = 16 << 20  # one JSON body is never longer

ErrorKind = Literal["unreachable", "timeout", "status", "malformed", "cut"]


class EngineError(Exception):
    """One line a user can act on, and what went wrong: the engine is unreachable, too slow,
    answered an HTTP error (`status`), sent something unreadable, or cut a stream midway."""

    def __init__(self, message: str, kind: ErrorKind, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


class Cancelled(Exception):
    """The caller's cancelled() turned true: the connection was closed."""


def never() -> bool:
    return False


@dataclass(frozen=True)
class Watch:
    deadline: float  # time.monotonic() past which a read gives up
    cancelled: Callable[[], bool] = never


class _WatchedReader(io.RawIOBase):
    """A socket's bytes, read only once select() says they are there: in between, the
    cancellation and the deadline are checked."""

    def __init__(self, sock: socket.socket, watch: Watch) -> None:
        self._sock = sock
        self._watch = watch

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        sock, watch = self._sock, self._watch
        while True:
            if watch.cancelled():
                raise Cancelled()
            left = watch.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            buffered = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
            if not buffered:
                ready, _, _ = select.select([sock], [], [], min(POLL_S, left))
                if not ready:
                    continue
            try:
                return sock.recv_into(buffer)
            except (ssl.SSLWantReadError, BlockingIOError, TimeoutError):
                continue


class _WatchedSocket:
    """What http.client.HTTPResponse reads from: only `makefile` is used."""

    def __init__(self, sock: socket.socket, watch: Watch) -> None:
        self._reader: Any = io.BufferedReader(_WatchedReader(sock, watch))

    def makefile(self, *args: Any, **kwargs: Any) -> Any:
        return self._reader


def _connection(url: str, watch: Watch) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EngineError(f"not an http(s) URL: {url!r}", "unreachable")
    timeout = max(0.05, min(CONNECT_TIMEOUT_S, watch.deadline - time.monotonic()))
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def response_class(sock: socket.socket, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(_WatchedSocket(sock, watch), *args, **kwargs)  # type: ignore[arg-type]

    conn.response_class = response_class  # type: ignore[assignment]
    path = parts.path or "/"
    return conn, path + (f"?{parts.query}" if parts.query else "")


def _where(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


@contextmanager
def request(
    method: str,
    url: str,
    *,
    watch: Watch,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> Iterator[http.client.HTTPResponse]:
    """An open response with a 2xx status; the connection is closed when the block ends (an
    abandoned stream is aborted that way). Other statuses raise EngineError('status') with
    the engine's own error message."""
    conn, path = _connection(url, watch)
    data = None if body is None else json.dumps(body).encode()
    all_headers = {"Accept": "application/json, text/event-stream, application/x-ndjson"}
    if data is not None:
        all_headers["Content-Type"] = "application/json"
    all_headers.update(headers or {})
    try:
        try:
            conn.request(method, path, body=data, headers=all_headers)
            response = conn.getresponse()
        except Cancelled:
            raise
        except TimeoutError as err:
            raise EngineError(f"{_where(url)}: no answer in time", "timeout") from err
        except (OSError, http.client.HTTPException) as err:
            raise EngineError(f"{_where(url)}: {_reason(err)}", "unreachable") from err
        if not 200 <= response.status < 300:
            detail = _error_detail(response)
            raise EngineError(
                f"{_where(url)}: HTTP {response.status}{f': {detail}' if detail else ''}",
                "status",
                response.status,
            )
        yield response
    finally:
        conn.close()


def _reason(err: BaseException) -> str:
    if isinstance(err, ConnectionRefusedError):
        return "connection refused (is the engine running?)"
    if isinstance(err, socket.gaierror):
        return f"unknown host ({err.strerror or err})"
    text = str(err) or type(err).__name__
    return text.splitlines()[0]


def _error_detail(response: http.client.HTTPResponse) -> str:
    """The engine's own words for an error status (vLLM, llama.cpp, Ollama, OpenAI shapes)."""
    try:
        raw = response.read(64 * 1024)
    except (Cancelled, OSError, http.client.HTTPException):
        return ""
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text.splitlines()[0][:200] if text else ""
    message: Any = data
    if isinstance(message, dict):
        message = message.get("error", message.get("message", message.get("detail", message)))
    if isinstance(message, dict):
        message = message.get("message", message)
    return str(message).splitlines()[0][:200] if message else ""


def read_json(response: http.client.HTTPResponse, url: str) -> Any:
    """The whole body as JSON; a body cut short or not JSON is 'malformed'."""
    try:
        raw = response.read(MAX_BODY)
    except Cancelled:
        raise
    except TimeoutError as err:
        raise EngineError(f"{_where(url)}: the answer did not arrive in time", "timeout") from err
    except (OSError, http.client.HTTPException) as err:
        raise EngineError(f"{_where(url)}: the answer was cut short ({err})", "cut") from err
    try:
        return json.loads(raw)
    except ValueError as err:
        raise EngineError(f"{_where(url)}: the answer is not JSON", "malformed") from err


def lines(response: http.client.HTTPResponse, url: str) -> Iterator[str]:
    """The body line by line (SSE events, NDJSON objects), without line ends, as they arrive.
    A connection that ends before the caller saw the stream's end is the caller's 'cut'."""
    while True:
        try:
            line = response.readline(MAX_LINE)
        except Cancelled:
            raise
        except TimeoutError as err:
            raise EngineError(
                f"{_where(url)}: the stream stalled past the deadline", "timeout"
            ) from err
        except (OSError, http.client.HTTPException) as err:
            raise EngineError(f"{_where(url)}: the stream broke ({_reason(err)})", "cut") from err
        if not line:
            return
        yield line.decode("utf-8", "replace").rstrip("\r\n")


def get_json(url: str, *, watch: Watch, headers: dict[str, str] | None = None) -> Any:
    with request("GET", url, watch=watch, headers=headers) as response:
        return read_json(response, url)


def post_json(url: str, body: Any, *, watch: Watch, headers: dict[str, str] | None = None) -> Any:
    with request("POST", url, watch=watch, body=body, headers=headers) as response:
        return read_json(response, url)


def get_text(url: str, *, watch: Watch, headers: dict[str, str] | None = None) -> str:
    with request("GET", url, watch=watch, headers=headers) as response:
        try:
            return response.read(MAX_BODY).decode("utf-8", "replace")
        except TimeoutError as err:
            raise EngineError(f"{_where(url)}: no answer in time", "timeout") from err
        except (OSError, http.client.HTTPException) as err:
            raise EngineError(f"{_where(url)}: the answer was cut short", "cut") from err


def deadline_in(seconds: float) -> float:
    return time.monotonic() + seconds


def sse_json(stream: Iterator[str], url: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream's `data:` lines, up to `data: [DONE]`.
    An error event (vLLM's `{"error": ...}`, llama.cpp's `error:` line) raises 'status'."""
    for line in stream:
        if not line or line.startswith(":"):
            continue
        field_name, _, payload = line.partition(":")
        payload = payload.strip()
        if field_name == "error":
            raise EngineError(
                f"{_where(url)}: the engine failed mid-stream: {payload[:200]}", "status"
            )
        if field_name != "data":
            continue
        if payload == "[DONE]":
            return
        yield _event(payload, url)


def ndjson(stream: Iterator[str], url: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of a newline-delimited JSON stream (Ollama)."""
    for line in stream:
        if line.strip():
            yield _event(line, url)


def _event(payload: str, url: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except ValueError as err:
        raise EngineError(f"{_where(url)}: a streamed event is not JSON", "malformed") from err
    if not isinstance(event, dict):
        raise EngineError(f"{_where(url)}: a streamed event is not an object", "malformed")
    error = event.get("error")
    if error:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise EngineError(f"{_where(url)}: the engine failed mid-stream: {message}", "status")
    return event
