"""The wire: LSP framing over stdio that survives corrupt frames, and pygls's protocol, hardened.

Framing (`FrameReader`). pygls's own reader trusts every `Content-Length`: a frame whose body is
shorter than announced swallows the next frame's header while waiting for the missing bytes, and
from then on every header is glued to a body and the stream never recovers. Here each frame is
checked and, when corrupt, the reader resynchronises on the next header:

- a raw `Content-Length: N` line (CRLF-terminated) can never occur inside a JSON text (JSON
  strings cannot hold raw line breaks, and the words are no JSON token), so one inside a body
  means that body was cut short: the bytes before it are handled when they are a JSON object
  (a client that counted its bytes wrong), otherwise dropped, and reading goes on at that header;
- a header block that does not parse (no or two different Content-Lengths, a line that is no
  `Name: value`, longer than MAX_HEADER_BYTES) or announces more than MAX_BODY_BYTES is skipped up
  to the next `Content-Length:`;
- a well-framed body that is not JSON gets a JSON-RPC parse error (id null).
Every skip is one warning line in the log. When stdin ends, `serve_stdio` returns.

Protocol (`RobustProtocol`): every request gets an answer, as JSON-RPC and LSP ask: params that
do not match the LSP types get InvalidParams (pygls alone logs it and never answers), requests
before `initialize` ServerNotInitialized, a second `initialize` and requests after `shutdown`
InvalidRequest, a message that is no JSON-RPC object InvalidRequest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, BinaryIO
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 8 * 1024
MAX_BODY_BYTES = 128 * 1024 * 1024  # a 20 MB document is ~25 MB of JSON; 10^12 is a lie
READ_CHUNK = 64 * 1024
PARENT_POLL_S = 2.0

# JSON-RPC / LSP error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
SERVER_NOT_INITIALIZED = -32002

# A whole Content-Length header line with its raw CRLF: impossible inside a JSON text.
_HEADER_LINE = re.compile(rb"(?i)content-length[ \t]{0,8}:[ \t]{0,8}\d{1,12}[ \t]{0,8}\r\n")
_HEADER_LINE_MAX = 64  # bytes such a line can span
_MARKER = re.compile(rb"(?i)content-length[ \t]*:")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_NAME = b"content-length"
_PARTIAL_REST = re.compile(rb"[ \t]{0,8}(?::[ \t]{0,8}\d{0,12}[ \t]{0,8}\r?)?")


@dataclass(frozen=True, slots=True)
class Frame:
    """What the reader found: a body to handle, a problem to log, or both."""

    body: bytes | None
    problem: str | None = None


def could_begin_header(tail: bytes) -> bool:
    """Whether `tail` (running to the end of the bytes received) may be the start of a
    `Content-Length: N` header line whose rest has not arrived yet."""
    lower = tail.lower()
    if len(lower) <= len(_NAME):
        return _NAME.startswith(lower)
    return lower.startswith(_NAME) and _PARTIAL_REST.fullmatch(lower, len(_NAME)) is not None


def parse_headers(block: bytes, max_body: int = MAX_BODY_BYTES) -> tuple[int | None, str | None]:
    """(Content-Length, None) for a valid header block (without its final CRLF CRLF), else
    (None, what is wrong)."""
    length: int | None = None
    for line in block.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        name = name.strip()
        if not sep or not _TOKEN.fullmatch(name):
            return None, f"malformed header line {line[:60]!r}"
        if name.lower() != _NAME:
            continue  # Content-Type and unknown headers
        value = value.strip()
        if not value.isdigit() or len(value) > 12:
            return None, f"invalid Content-Length {value[:30]!r}"
        if length is not None and int(value) != length:
            return None, "two different Content-Length headers"
        length = int(value)
    if length is None:
        return None, f"no Content-Length in header {block[:60]!r}"
    if length > max_body:
        return None, f"Content-Length {length} is over the {max_body}-byte limit"
    return length, None


def _json_object(data: bytes) -> bool:
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        return False


class FrameReader:
    """Splits an LSP byte stream into message bodies; see the module docstring for the rules.

    `feed(bytes)` returns the frames completed by those bytes, in order. Pure: no I/O, no JSON
    parsing of well-framed bodies.
    """

    def __init__(
        self, *, max_body: int = MAX_BODY_BYTES, max_header: int = MAX_HEADER_BYTES
    ) -> None:
        self.max_body = max_body
        self.max_header = max_header
        self._buf = bytearray()
        self._length: int | None = None  # body length of the frame whose header was read
        self._scanned = 0  # body bytes searched for an embedded header so far
        self.frames = 0  # well-framed bodies delivered
        self.problems = 0

    @property
    def pending(self) -> int:
        """Bytes received and not yet delivered or dropped."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while (frame := self._next()) is not None:
            if frame.problem is not None:
                self.problems += 1
            if frame.body is not None:
                self.frames += 1
            frames.append(frame)
        return frames

    def _next(self) -> Frame | None:
        if self._length is None:
            return self._header()
        return self._body(self._length)

    def _header(self) -> Frame | None:
        buf = self._buf
        skip = 0
        while skip < len(buf) and buf[skip] in b"\r\n":  # stray line breaks between frames
            skip += 1
        if skip:
            del buf[:skip]
        if not buf:
            return None
        end = buf.find(b"\r\n\r\n", 0, self.max_header + 4)
        if end < 0:
            if len(buf) > self.max_header:
                return self._resync(f"no end of headers within {self.max_header} bytes")
            return None
        length, problem = parse_headers(bytes(buf[:end]), self.max_body)
        if problem is not None or length is None:
            return self._resync(problem or "invalid header")
        del buf[: end + 4]
        self._length = length
        self._scanned = 0
        return self._body(length)

    def _body(self, length: int) -> Frame | None:
        buf = self._buf
        avail = len(buf)
        start = max(0, self._scanned - _HEADER_LINE_MAX)
        found = _HEADER_LINE.search(buf, start, min(avail, length + _HEADER_LINE_MAX))
        if found is not None and found.start() < length:
            cut = found.start()
            body = bytes(buf[:cut]).strip()
            del buf[:cut]
            self._length = None
            problem = f"a message announced {length} bytes but the next header began after {cut}"
            if body and _json_object(body):
                return Frame(body, f"{problem}; handled the {cut} bytes received")
            return Frame(None, f"{problem}; dropped them and resynchronised")
        if avail < length:
            self._scanned = avail
            return None
        if avail - length < _HEADER_LINE_MAX and self._header_may_start_in_tail(length, avail):
            self._scanned = avail
            return None  # the rest of that header decides whether this body was cut short
        body = bytes(buf[:length])
        del buf[:length]
        self._length = None
        return Frame(body)

    def _header_may_start_in_tail(self, length: int, avail: int) -> bool:
        buf = self._buf
        for p in range(max(0, avail - _HEADER_LINE_MAX), length):
            if buf[p] in b"cC" and could_begin_header(bytes(buf[p:avail])):
                return True
        return False

    def _resync(self, problem: str) -> Frame:
        """Drop bytes up to the next `Content-Length:` (or all but a tail that may start one)."""
        buf = self._buf
        found = _MARKER.search(buf, 1)
        if found is not None:
            del buf[: found.start()]
        else:
            keep = len(buf)
            for p in range(max(1, len(buf) - _HEADER_LINE_MAX), len(buf)):
                if could_begin_header(bytes(buf[p:])):
                    keep = p
                    break
            del buf[:keep]
        self._length = None
        return Frame(None, f"corrupt frame: {problem}; skipped to the next header")


# -- the protocol -----------------------------------------------------------------------------

# handle_message ignores messages whose jsonrpc is not "2.0": the answer was already sent.
_ANSWERED = SimpleNamespace(jsonrpc="answered")


# Notifications that pygls applies to an open document (and fails on an unknown one).
_DOCUMENT_UPDATES = frozenset({types.TEXT_DOCUMENT_DID_CHANGE, types.TEXT_DOCUMENT_DID_SAVE})
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(value: Any) -> Any:
    """Every string with its lone surrogates (JSON allows `\\ud800`, UTF-8 cannot hold it)
    replaced by U+FFFD: the same length in UTF-16, UTF-32 and UTF-8, so positions stay valid."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    return value


def _is_notification(method: Any) -> bool:
    """An LSP notification method (sent with an id it would never be answered)."""
    entry = types.METHOD_TO_TYPES.get(method) if isinstance(method, str) else None
    return entry is not None and entry[1] is None and method != types.EXIT


def _reply_id(data: Any) -> int | str | None:
    """The id to answer a message with: its own when it is a valid JSON-RPC id, else null."""
    msg_id = data.get("id") if isinstance(data, dict) else getattr(data, "id", None)
    if isinstance(msg_id, bool) or not isinstance(msg_id, int | str):
        return None
    return msg_id


# pygls log lines RobustProtocol replaces by its own, or that are routine (an editor cancels a
# request whose answer is already on its way).
_QUIET = ("Unable to deserialize message", "Cancel notification for unknown message id")


class _ClientMistakes(logging.Filter):
    """pygls logs a full traceback for every message a client got wrong; RobustProtocol logs
    one line for those, so drop pygls's copy (and keep tracebacks of real failures), and the
    routine lines of _QUIET."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(_QUIET):
            return False
        if record.exc_info and isinstance(record.exc_info[1], JsonRpcException):
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_PYGLS_LOG = logging.getLogger("pygls.protocol.json_rpc")


def guard_sequences(converter: Any) -> None:
    """Only JSON arrays become sequences. cattrs structures any iterable as one: a long string
    where the LSP types want a list becomes one element per character, one exception each, and
    holds the event loop (found by the fuzz: docs/reliability.md)."""
    from cattrs.cols import (
        homogenous_tuple_structure_factory,
        is_mutable_sequence,
        is_sequence,
        list_structure_factory,
    )

    def guarded(factory: Any) -> Any:
        def make(cl: Any, conv: Any) -> Any:
            inner = factory(cl, conv)

            def structure(obj: Any, target: Any) -> Any:
                if not isinstance(obj, list | tuple):
                    raise TypeError(f"expected an array, not {type(obj).__name__}")
                return inner(obj, target)

            return structure

        return make

    # Registered later, tried first: lists get the list hook, other sequences the tuple one.
    converter.register_structure_hook_factory(
        is_sequence, guarded(homogenous_tuple_structure_factory)
    )
    converter.register_structure_hook_factory(is_mutable_sequence, guarded(list_structure_factory))


class RobustProtocol(LanguageServerProtocol):
    _initialize_seen = False

    def __init__(self, server: Any, converter: Any) -> None:
        guard_sequences(converter)  # before the first message builds any structure hook
        super().__init__(server, converter)
        if not any(isinstance(f, _ClientMistakes) for f in _PYGLS_LOG.filters):
            _PYGLS_LOG.addFilter(_ClientMistakes())

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):  # type: ignore[override]
        # pygls keeps the future of every notification whose handler is a generator or a
        # coroutine (its built-in didOpen/didChange/didClose are generators) in
        # _request_futures and never drops it: a future per keystroke, for as long as the server
        # runs (found by the soak). Drop each one once it is done.
        def done(future: Any) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def cancel_running_handlers(self) -> None:
        """At shutdown, before pygls's own loop: cancel the handlers still running but the
        shutdown's own, from a snapshot. pygls cancels them while iterating _request_futures,
        and the cancel of a notification's future runs `done` above at once, which deletes from
        that dict: a RuntimeError, and the shutdown request failed (a client then never sends
        `exit`). Seen with `initialized` still waiting for workspace/configuration."""
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()

    def send_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        """A JSON-RPC error response (written as a plain object: the id may be null)."""
        self._send_data(
            {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
        )

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as err:
            method = data.get("method") if isinstance(data, dict) else None
            if isinstance(data, dict) and "id" in data and "method" in data:  # a request
                log.warning("invalid params for %.80r (id %s)", method, data.get("id"))
                error = JsonRpcInvalidParams(f"invalid params for {method!r}: {err.message}")
                self.send_error(_reply_id(data), error.code, error.message)
            elif isinstance(data, dict) and "id" in data:
                # A malformed answer to one of our requests: fail that request, do not leave
                # whoever awaits it waiting forever.
                future = self._request_futures.pop(data.get("id"), None)  # type: ignore[arg-type]
                log.warning("malformed response to request %s", data.get("id"))
                if future is not None and not future.done():
                    future.set_exception(JsonRpcInvalidParams("malformed response"))
            else:
                log.warning("ignoring a malformed %s notification", method or "unknown")
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is _ANSWERED:
            return
        method = getattr(message, "method", None)
        is_request = method is not None and hasattr(message, "id")
        if isinstance(message, dict) or getattr(message, "jsonrpc", None) != "2.0":
            log.warning("not a JSON-RPC 2.0 message: %.80r", message)
            if isinstance(message, dict):
                is_notification = "method" in message and "id" not in message
            else:
                is_notification = method is not None and not is_request
            if not is_notification:
                self.send_error(_reply_id(message), INVALID_REQUEST, "not a JSON-RPC 2.0 message")
            return
        if method == types.CANCEL_REQUEST and _reply_id(getattr(message, "params", None)) is None:
            log.warning("ignoring $/cancelRequest without a valid id")
            return
        if method in _DOCUMENT_UPDATES and self._initialize_seen and not self._shutdown:
            uri = getattr(getattr(message.params, "text_document", None), "uri", None)
            if not isinstance(uri, str) or unquote(uri) not in self.workspace.text_documents:
                log.info("%s for a document that is not open (%.100s); ignored", method, uri)
                return
        if method == types.INITIALIZE:
            if self._initialize_seen:
                log.warning("a second initialize request; refused")
                self.send_error(
                    _reply_id(message), INVALID_REQUEST, "initialize may only be sent once"
                )
                return
            self._initialize_seen = True
        elif method is not None and method != types.EXIT:
            if not self._initialize_seen:
                if is_request:
                    self.send_error(_reply_id(message), SERVER_NOT_INITIALIZED, "initialize first")
                else:
                    log.info("dropped %s before initialize", method)
                return
            if self._shutdown:
                if is_request:
                    self.send_error(
                        _reply_id(message), INVALID_REQUEST, "the server is shutting down"
                    )
                else:
                    log.info("dropped %s after shutdown", method)
                return
        super().handle_message(message)

    def handle_body(self, body: bytes) -> None:
        """Parse one framed body and dispatch it (pygls's read loop does the same, unguarded)."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError
            log.warning("a message of %d bytes is not JSON: %s", len(body), str(err)[:120])
            self.send_error(None, PARSE_ERROR, f"parse error: {str(err)[:120]}")
            return
        if isinstance(data, dict) and data.get("id") is not None and _reply_id(data) is None:
            # JSON-RPC ids are strings, numbers or null
            log.warning("a message with an invalid id %.40r; refused", data["id"])
            self.send_error(None, INVALID_REQUEST, "an id must be a string or a number")
            return
        if isinstance(data, dict) and "id" in data and _is_notification(data.get("method")):
            log.warning("%s is a notification but came with an id; refused", data["method"])
            self.send_error(
                _reply_id(data), INVALID_REQUEST, f"{data['method']} is a notification: no id"
            )
            return
        if _SURROGATE_ESCAPE.search(body):
            data = without_lone_surrogates(data)
        try:
            # Only the message itself is structured (pygls's object_hook would also structure
            # any nested object that happens to hold a "jsonrpc" key).
            message = self.structure_message(data) if isinstance(data, dict) else data
            self.handle_message(message)
        except Exception as err:
            log.exception("unable to handle a message")
            if isinstance(data, dict) and "method" in data and "id" in data:
                self.send_error(_reply_id(data), INVALID_REQUEST, f"cannot handle it: {err}")
            self._server._report_server_error(err, JsonRpcException)  # type: ignore[attr-defined]


# -- the stdio loop ---------------------------------------------------------------------------


async def read_frames(
    protocol: RobustProtocol, stdin: BinaryIO, stop: threading.Event | None = None
) -> FrameReader:
    """Feed stdin through a FrameReader into the protocol until stdin ends (or `stop` is set).

    stdin is read on a daemon thread: a blocked read must never keep the process alive.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=64)
    read = getattr(stdin, "read1", stdin.read)

    def pump() -> None:
        while True:
            try:
                data = read(READ_CHUNK)
            except (OSError, ValueError):
                data = b""
            future = asyncio.run_coroutine_threadsafe(chunks.put(data), loop)
            try:
                future.result()
            except Exception:  # the loop is gone
                return
            if not data:
                return

    threading.Thread(target=pump, name="memosight-stdin", daemon=True).start()
    reader = FrameReader()
    while stop is None or not stop.is_set():
        data = await chunks.get()
        if not data:
            if reader.pending:
                log.warning("input ended inside a message (%d bytes unread)", reader.pending)
            break
        for frame in reader.feed(data):
            if frame.problem is not None:
                log.warning("%s", frame.problem)
            if frame.body is not None:
                protocol.handle_body(frame.body)
    return reader


def parent_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def watch_parent(server: Any, on_gone, poll_s: float = PARENT_POLL_S) -> None:
    """Call `on_gone(pid)` once the editor named in initialize's processId has died.

    A pid that is not alive when first seen is not watched: it belongs to another PID namespace
    (an editor outside the container the server runs in), and exiting would be wrong.
    """

    def run() -> None:
        pid = None
        while pid is None:
            time.sleep(poll_s / 4)
            pid = getattr(server, "process_id", None)
        if not isinstance(pid, int) or pid <= 0 or not parent_alive(pid):
            log.debug("not watching the client's process %r", pid)
            return
        while parent_alive(pid):
            time.sleep(poll_s)
        on_gone(pid)

    threading.Thread(target=run, name="memosight-parent", daemon=True).start()


def serve_stdio(server: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> str:
    """Serve LSP over stdio (pygls's start_io, with the resynchronising reader). Returns why it
    ended: "eof" (the client closed our stdin) or "broken-pipe"."""
    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    reason = "eof"
    try:
        asyncio.run(read_frames(server.protocol, stdin or sys.stdin.buffer, server._stop_event))
    except BrokenPipeError:
        reason = "broken-pipe"
    except (KeyboardInterrupt, SystemExit):
        reason = "interrupted"
    finally:
        server.shutdown()
    return reason
