"""A tiny HTTP server on loopback that answers the way an engine would, or would not.

Only for what no real engine here can show (a malformed answer, a stream cut midway, a
server that stalls) and for Ollama, which cannot be installed on these machines. Each route is
a function `(handler, body) -> None` that writes the response itself; `served` lists the
requests (path, JSON body) in order and `disconnects` counts streams the client closed early.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[["Handler", Any], None]


class Handler(BaseHTTPRequestHandler):
    server: FakeEngine
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.server.served.append((self.path, body))
        route = self.server.routes.get((method, self.path))
        if route is None:
            self.send_json({"error": f"no route {method} {self.path}"}, 404)
            return
        route(self, body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- response helpers --------------------------------------------------------------------

    def send_json(self, data: Any, status: int = 200) -> None:
        payload = json.dumps(data).encode()
        self.send_raw(payload, status, "application/json")

    def send_raw(self, payload: bytes, status: int = 200, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def stream(
        self, chunks: Iterable[bytes], *, kind: str = "text/event-stream", delay_s: float = 0.0
    ) -> bool:
        """Chunked transfer of `chunks`; False when the client went away midway."""
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                if delay_s:
                    time.sleep(delay_s)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.disconnects += 1
            return False
        return True

    def cut(self, chunks: Iterable[bytes], kind: str = "text/event-stream") -> None:
        """Send some chunks, then drop the connection without ending the body."""
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)


class FakeEngine(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, routes: dict[tuple[str, str], Route], port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.routes = routes
        self.served: list[tuple[str, Any]] = []
        self.disconnects = 0
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()

    def bodies(self, path: str) -> list[Any]:
        return [body for p, body in self.served if p == path]


def sse(*events: Any) -> list[bytes]:
    return [f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n".encode() for e in events]


def ndjson(*events: Any) -> list[bytes]:
    return [(json.dumps(e) + "\n").encode() for e in events]
