"""The editor's side of a kept model: greet an idle host of this key, or start one, then pass
the editor's bytes to it and its bytes back until either side ends.

Standard library only, so the editor's process starts in milliseconds. Every wait is bounded: a
host that does not answer its greeting, or never binds its socket, is given up on and the
caller serves the editor in its own process instead.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from .rendezvous import (
    ACCEPTED,
    EXIT_HEADER,
    MAX_SOCKET_PATH,
    greeting,
    host_key,
    host_sockets,
    new_socket_path,
    runtime_dir,
    supported,
)

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 1.0
ANSWER_TIMEOUT_S = 5.0  # a host answers from a thread of its own, even while it loads a model
START_TIMEOUT_S = 30.0  # a new host binds its socket before its heavy imports
# After the editor closed our stdin the host ends the session; past this the relay leaves anyway.
DRAIN_TIMEOUT_S = 10.0
CHUNK = 65536
STALE = "stale"  # a socket file nobody listens on (its host was killed)


class Greeted:
    def __init__(self, sock: socket.socket, pid: int | None) -> None:
        self.sock = sock
        self.pid = pid


def relay_to_host(keep_alive_s: float, host_args: Sequence[str]) -> int | None:
    """Serve this editor through a host: the exit code once the session ended, or None when no
    host could be reached or started (the caller serves in its own process)."""
    if not supported():
        return None
    folder = runtime_dir()
    if folder is None:
        return None
    key = host_key()
    greeted = idle_host(folder, key) or start_host(folder, key, keep_alive_s, host_args)
    if greeted is None:
        return None
    log.info("serving through the model host (process %s)", greeted.pid)
    return pass_through(greeted.sock)


def idle_host(folder: Path, key: str) -> Greeted | None:
    for path in host_sockets(folder, key):
        greeted = greet(path)
        if greeted == STALE:
            with suppress(OSError):
                path.unlink()
        elif isinstance(greeted, Greeted):
            return greeted
    return None


def start_host(
    folder: Path, key: str, keep_alive_s: float, host_args: Sequence[str]
) -> Greeted | None:
    path = new_socket_path(folder, key)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        log.warning("the model host's socket path is too long (%s): serving in this process", path)
        return None
    command = [
        sys.executable,
        "-m",
        "memosight_lsp",
        "--model-host",
        str(path),
        "--keep-alive",
        repr(keep_alive_s),
        *host_args,
    ]
    try:
        # A session of its own: the editor's signals and process group do not reach it.
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as err:
        log.warning("cannot start the model host (%s): serving in this process", err)
        return None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.warning(
                "the model host exited at start (code %s): serving in this process",
                process.returncode,
            )
            return None
        if path.exists():
            greeted = greet(path)
            if isinstance(greeted, Greeted):
                return greeted
        time.sleep(0.005)
    log.warning("the model host did not answer in %.0f s: serving in this process", START_TIMEOUT_S)
    with suppress(OSError):
        process.kill()
    return None


def greet(path: Path) -> Greeted | str | None:
    """Connect and greet, handing the host our stderr for the session's log: a Greeted when it
    takes this session, STALE when nobody listens, None when it is busy or does not answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT_S)
    try:
        sock.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        return STALE
    except OSError:
        sock.close()
        return None
    try:
        socket.send_fds(sock, [greeting()], _log_fds())
        sock.settimeout(ANSWER_TIMEOUT_S)
        answer = _line(sock)
    except OSError:
        sock.close()
        return None
    words = answer.split()
    if not words or words[0] != ACCEPTED:
        sock.close()
        return None
    sock.settimeout(None)
    pid = int(words[1]) if len(words) > 1 and words[1].isdigit() else None
    return Greeted(sock, pid)


def _log_fds() -> list[int]:
    try:
        return [sys.stderr.fileno()]
    except (AttributeError, OSError, ValueError):  # no stderr: the session logs nowhere
        return []


def _line(sock: socket.socket, limit: int = 64) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        got = sock.recv(limit - len(data))
        if not got:
            break
        data += got
    return data


class Downstream:
    """The host's bytes cut into frames by their Content-Length (the server's output is always
    framed) and forwarded whole; the host's last words, a header block `MemoSight-Exit: N` with
    no body, are the exit code (the server's: 0 after a shutdown request, else 1, as the LSP
    spec has it) and are not forwarded. A body is passed on as it comes, never scanned."""

    MAX_HEADER = 4096

    def __init__(self) -> None:
        self.exit_code: int | None = None
        self._header = bytearray()
        self._body_left = 0
        self._lost = False  # output it could not frame: passed on as it is from then on

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        view = memoryview(data)
        while view:
            if self._lost:
                out += view
                break
            if self._body_left:
                taken = min(self._body_left, len(view))
                out += view[:taken]
                self._body_left -= taken
                view = view[taken:]
                continue
            self._header += view
            view = memoryview(b"")
            end = self._header.find(b"\r\n\r\n")
            if end < 0:
                if len(self._header) > self.MAX_HEADER:
                    self._lose(out)
                break
            header, rest = bytes(self._header[: end + 4]), bytes(self._header[end + 4 :])
            self._header.clear()
            if header.startswith(EXIT_HEADER):
                code = header[len(EXIT_HEADER) :].strip()
                self.exit_code = int(code) if code.isdigit() else 1
            else:
                length = _content_length(header)
                if length is None:
                    out += header
                    self._lost = True
                else:
                    out += header
                    self._body_left = length
            view = memoryview(rest)
        return bytes(out)

    def _lose(self, out: bytearray) -> None:
        out += self._header
        self._header.clear()
        self._lost = True


def _content_length(header: bytes) -> int | None:
    for line in header.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return int(value.strip())
    return None


def pass_through(sock: socket.socket) -> int:
    """The editor's stdin to the host, the host's bytes to our stdout; returns when the host
    closes the session (the server's exit code) or the connection breaks (1)."""
    downstream = Downstream()

    def upstream() -> None:
        try:
            while True:
                data = os.read(0, CHUNK)
                if not data:
                    break
                sock.sendall(data)
        except OSError:
            pass
        finally:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_WR)  # the host sees the editor leave and ends the session
            timer = threading.Timer(DRAIN_TIMEOUT_S, os._exit, (0,))
            timer.daemon = True
            timer.start()

    threading.Thread(target=upstream, name="memosight-relay", daemon=True).start()
    while True:
        try:
            data = sock.recv(CHUNK)
        except OSError:
            return 1
        if not data:
            return 1 if downstream.exit_code is None else downstream.exit_code
        try:
            _write_all(1, downstream.feed(data))
        except OSError:  # the editor is gone
            return 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
