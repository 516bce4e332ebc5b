"""The host process: serves one editor's session at a time over its Unix socket, keeps the
model loaded after it, and leaves when no editor came for keep-alive seconds, or at once when a
session leaves it in a state that only a fresh start cures (the model not ready, a job the
worker had to abandon).

A greeting while a session runs is answered BUSY (the relay then starts a host of its own), so
no editor waits on another's session. The socket is bound before the server's heavy imports:
the relay that started this host connects within milliseconds and its editor's first messages
wait in the socket while the imports run.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

from .rendezvous import (
    ACCEPTED,
    BUSY,
    EXIT_HEADER,
    IDLE,
    MAX_GREETING,
    PROBE,
    host_sockets,
    key_of,
    working_folder,
)

if TYPE_CHECKING:
    from memosight_lsp.session.model_host import KeptModel

log = logging.getLogger(__name__)

GREETING_TIMEOUT_S = 2.0
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass(frozen=True)
class Greeting:
    """A relay that greeted: its connection, its stderr (or None) and its working folder."""

    conn: socket.socket
    log_fd: int | None
    cwd: str


class Lobby:
    """Hands greeted connections to the main thread, one session at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: Greeting | None = None
        self._busy = False
        self._closed = False
        self.model_tag = "none"  # what the kept model is, for other hosts' probes

    def idle_tag(self) -> str | None:
        """The kept model's tag while no session runs or waits; None otherwise."""
        with self._cond:
            return None if self._busy or self._closed else self.model_tag

    def offer(self, greeting: Greeting) -> bool:
        with self._cond:
            if self._busy or self._closed:
                return False
            self._busy = True
            self._waiting = greeting
            self._cond.notify_all()
            return True

    def next_session(self, keep_alive_s: float) -> Greeting | None:
        """The next greeted connection, or None (and no more) after keep_alive_s without one."""
        deadline = time.monotonic() + keep_alive_s
        with self._cond:
            while self._waiting is None:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    self._closed = True
                    return None
                self._cond.wait(left)
            waiting, self._waiting = self._waiting, None
            return waiting

    def session_ended(self) -> None:
        with self._cond:
            self._busy = False

    def close(self) -> None:
        with self._cond:
            self._closed = True


def run_host(path: Path, keep_alive_s: float) -> int:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # the socket file is the user's alone
    try:
        listener.bind(os.fspath(path))
    finally:
        os.umask(old_mask)
    listener.listen(8)
    _leave_on_sigterm(path)
    _stacks_on_sigusr1(path)
    log.info("model host %d on %s (keep-alive %g s)", os.getpid(), path, keep_alive_s)
    lobby = Lobby()
    threading.Thread(
        target=_accept, args=(listener, lobby), name="memosight-host-accept", daemon=True
    ).start()
    kept: KeptModel | None = None
    served = 0
    try:
        while True:
            session = lobby.next_session(keep_alive_s)
            if session is None:
                log.info("no editor for %g s: the model host leaves", keep_alive_s)
                break
            served += 1
            kept = _serve(session, kept)
            if kept is None:
                log.info("nothing worth keeping after session %d: the model host leaves", served)
                break
            lobby.model_tag = kept.host.tag()
            if _twin_idle(path, lobby.model_tag):
                log.info("another host keeps the same model: this one leaves")
                break
            lobby.session_ended()
    finally:
        lobby.close()
        for leftover in (path, path.with_suffix(".stacks")):
            with suppress(OSError):
                leftover.unlink()
        with suppress(OSError):
            listener.close()
    logging.shutdown()
    os._exit(0)  # the model's threads, watchers and readers must not hold the process


def _stacks_on_sigusr1(path: Path) -> None:
    """SIGUSR1 writes every thread's stack to `<socket>.stacks` (a host has no terminal): what
    to attach to a report of a host that does not answer."""
    try:
        stacks = open(path.with_suffix(".stacks"), "w")  # noqa: SIM115 (open for the process)
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    except (OSError, AttributeError, ValueError):
        log.debug("no stack dumps on SIGUSR1", exc_info=True)


def _leave_on_sigterm(path: Path) -> None:
    """SIGTERM ends the host at once, whatever its threads do, and its socket file goes with it
    (a relay would clear it anyway). The signal is blocked in every thread (the ones started
    later inherit that) and taken by one that waits for it: a Python handler would wait for the
    main thread, which may be inside a session."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def wait() -> None:
        signal.sigwait({signal.SIGTERM})
        for leftover in (path, path.with_suffix(".stacks")):
            with suppress(OSError):
                leftover.unlink()
        os._exit(0)

    threading.Thread(target=wait, name="memosight-host-sigterm", daemon=True).start()


def _accept(listener: socket.socket, lobby: Lobby) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            conn.settimeout(GREETING_TIMEOUT_S)
            message, fds, _, _ = socket.recv_fds(conn, MAX_GREETING, 1)
            if message == PROBE:
                tag = lobby.idle_tag()
                conn.sendall(BUSY if tag is None else IDLE + b" %s\n" % tag.encode())
                conn.close()
                continue
            while message.count(b"\n") < 2 and len(message) < MAX_GREETING:
                more = conn.recv(MAX_GREETING - len(message))
                if not more:
                    break
                message += more
            cwd = working_folder(message)
            if cwd is None:
                raise OSError("not a relay's greeting")
            conn.settimeout(None)
            log_fd = fds[0] if fds else None
            if lobby.offer(Greeting(conn, log_fd, cwd)):
                # From here the main thread owns the connection and the fd: a relay gone
                # meanwhile makes an empty session there, so a failed send closes nothing here.
                with suppress(OSError):
                    conn.sendall(ACCEPTED + b" %d\n" % os.getpid())
                continue
            conn.sendall(BUSY)
        except OSError as err:
            log.debug("a greeting failed: %s", err)
        for fd in fds:
            with suppress(OSError):
                os.close(fd)
        conn.close()


def _twin_idle(path: Path, tag: str) -> bool:
    """Whether another host of this key idles with the same model: then this one leaves, and
    closing several editors leaves one host per model, not one each. This host answers BUSY
    while it asks (its session has not ended in the lobby yet), so two hosts ending at once
    both stay rather than both leave."""
    for other in host_sockets(path.parent, key_of(path)):
        if other == path:
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(GREETING_TIMEOUT_S)
                probe.connect(os.fspath(other))
                probe.sendall(PROBE)
                answer = probe.recv(256)
        except OSError:
            continue
        if answer == IDLE + b" %s\n" % tag.encode():
            return True
    return False


def _serve(greeting: Greeting, kept: KeptModel | None) -> KeptModel | None:
    """One session, in the relay's working folder; its log also goes to the relay's stderr (the
    editor's output panel)."""
    conn = greeting.conn
    handler = _session_log(greeting.log_fd)
    with suppress(OSError):
        os.chdir(greeting.cwd)
    reader = cast(BinaryIO, conn.makefile("rb", buffering=0))  # read() returns what came
    writer = conn.makefile("wb")

    def end_connection(code: int) -> None:
        with suppress(OSError):  # after every reply: the relay exits with the code (relay.py)
            writer.write(EXIT_HEADER + b" %d\r\n\r\n" % code)
            writer.flush()
        with suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)

    try:
        from memosight_lsp.server.main import serve_session

        log.info("a session begins%s", " with the model kept" if kept is not None else "")
        return serve_session(reader, writer, kept, end_connection)
    except Exception:
        log.exception("the session failed")
        return None
    finally:
        for stream in (reader, writer):
            with suppress(OSError, ValueError):
                stream.close()
        conn.close()
        with suppress(OSError):
            os.chdir("/")  # an idle host pins no project's folder
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()
            with suppress(OSError):
                # A StreamHandler leaves its stream open; the relay's stderr must close here,
                # or the editor waits for its end after the relay left (asyncio's clients do).
                handler.stream.close()


def _session_log(log_fd: int | None) -> logging.StreamHandler | None:
    if log_fd is None:
        return None
    try:
        stream = os.fdopen(log_fd, "w", encoding="utf-8", errors="replace", buffering=1)
    except OSError:
        with suppress(OSError):
            os.close(log_fd)
        return None
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(handler)
    return handler
