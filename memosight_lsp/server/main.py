"""Build and run the server (stdio by default). Nothing but the protocol goes to stdout."""

from __future__ import annotations

import logging

from .features import register
from .server import MemoSightServer

log = logging.getLogger(__name__)


def build_server() -> MemoSightServer:
    server = MemoSightServer()
    register(server)
    return server


def serve(*, tcp: bool = False, host: str = "127.0.0.1", port: int = 2087) -> None:
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # pygls logs every message body at INFO: noise, and slow on big documents.
        logging.getLogger("pygls").setLevel(logging.WARNING)
    server = build_server()
    try:
        if tcp:
            log.info("listening on %s:%d", host, port)
            server.start_tcp(host, port)
        else:
            server.start_io()
    finally:
        server.stop_worker()
