"""`exit` ends the process at once, with the exit code the LSP spec asks for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def run_session(*, shutdown_first: bool) -> int:
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"capabilities": {}, "rootUri": None, "processId": None},
        },
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
    ]
    if shutdown_first:
        messages.append({"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None})
    messages.append({"jsonrpc": "2.0", "method": "exit", "params": None})
    server = subprocess.Popen(
        [sys.executable, "-m", "memosight_lsp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None
    # stdin stays open: the server must leave on `exit`, not because its input ended.
    server.stdin.write(b"".join(frame(m) for m in messages))
    server.stdin.flush()
    try:
        return server.wait(timeout=60)
    finally:
        server.kill()


@pytest.mark.slow
@pytest.mark.parametrize(("shutdown_first", "code"), [(True, 0), (False, 1)])
def test_exit_code(shutdown_first, code):
    assert run_session(shutdown_first=shutdown_first) == code
