"""Build and run the server (stdio by default). Nothing but the protocol goes to stdout."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import BinaryIO

from memosight_lsp.session.model_host import KeptModel

from .features import register
from .protocol import serve_stdio, watch_parent
from .server import MemoSightServer

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


def build_server(kept: KeptModel | None = None, *, lingers: bool = False) -> MemoSightServer:
    server = MemoSightServer(kept, lingers=lingers)
    register(server)
    return server


def serve(*, tcp: bool = False, host: str = "127.0.0.1", port: int = 2087) -> None:
    quiet_pygls()
    server = build_server()
    if tcp:
        try:
            log.info("listening on %s:%d", host, port)
            server.start_tcp(host, port)
        finally:
            server.stop_worker()
        return
    watch_parent(server, lambda pid: leave(server, f"the editor (process {pid}) is gone"))
    ended = serve_stdio(server)
    reason = "the client closed the connection" if ended != "interrupted" else "interrupted"
    leave(server, reason if server.shutdown_requested else f"{reason} without shutdown")


def serve_session(
    reader: BinaryIO,
    writer: BinaryIO,
    kept: KeptModel | None,
    end_connection: Callable[[int], None],
) -> KeptModel | None:
    """One editor's session in a lingering host (host_process/host.py), over its connection:
    returns the model the next session may take over (None: the host should not linger).
    `end_connection` gets the exit code an `exit` notification means (0 after a shutdown
    request, else 1), after every reply was written."""
    quiet_pygls()
    server = build_server(kept, lingers=True)
    exited: list[bool] = []

    def end_on_exit() -> None:
        exited.append(True)
        end_connection(0 if server.shutdown_requested else 1)

    server.end_connection = end_on_exit
    ended = serve_stdio(server, reader, writer)  # pygls ends an `exit` with SystemExit
    log.info("the session ended (%s)", "exit" if exited else ended)
    server.stop_worker()
    return server.kept_model()


def quiet_pygls() -> None:
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # pygls logs every message body at INFO: noise, and slow on big documents.
        logging.getLogger("pygls").setLevel(logging.WARNING)


def leave(server: MemoSightServer, why: str) -> None:
    """End the process now, as `exit` does: the client is gone and nothing may linger (the model
    worker, watchers, the stdin reader). Exit code 0 only after a shutdown request (LSP spec)."""
    if server.shutdown_requested:
        log.info("%s; exiting", why)
    else:
        log.warning("%s; exiting", why)
    stopping = threading.Thread(target=server.stop_worker, name="memosight-stop", daemon=True)
    stopping.start()
    stopping.join(STOP_TIMEOUT_S)  # a stuck watcher or decode must not keep the process alive
    logging.shutdown()
    os._exit(0 if server.shutdown_requested else 1)
