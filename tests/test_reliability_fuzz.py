"""Protocol fuzzing of the real server over stdio: no crash, no hang, every request answered."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from memosight_lsp.server.main import build_server
from tools.reliability import fuzz
from tools.reliability.fuzz import BIG

pytestmark = pytest.mark.slow


def test_the_fuzzer_knows_every_method_the_server_has():
    server = build_server()
    try:
        registered = set(server.protocol.fm.features) | set(server.protocol.fm.builtin_features)
    finally:
        server.stop_worker()
    assert registered <= set(fuzz.METHODS)


def test_a_seeded_fuzz_run_has_no_crash_no_hang_and_answers_every_request(tiny_model_dir, tmp_path):
    log = tmp_path / "server.log"
    args = fuzz.build_parser().parse_args(
        [
            "--model",
            str(tiny_model_dir),
            "--seed",
            "7",
            "--messages",
            "2000",
            "--seconds",
            "120",
            "--big-every",
            "400",
            "--log-file",
            str(log),
        ]
    )
    result = fuzz.run(args)
    assert result["messages"] >= 2000
    assert set(result["byKind"]) == {"framing", "wrongShape", "didChangeFlood"}
    assert result["crashes"] == []
    assert result["hangs"] == []
    assert result["liveness"]["answered"] == result["batches"]
    assert result["liveness"]["errors"] == 0
    assert result["unanswered"] == 0, result["unansweredIds"]
    assert result["badOutput"] == []
    assert result["lifecycle"]["violations"] == []
    assert result["serverTracebacks"] == 0, log.read_text(errors="replace")[-3000:]
    assert result["errorResponses"].get("-32603", 0) == 0  # no handler failed on bad input
    assert result["exitCode"] == 0
    # The frame (5 bytes announced, 3 sent) was skipped with one line, and answered after.
    assert "next header began after 3; dropped them and resynchronised" in log.read_text()


def test_a_huge_string_where_a_list_belongs_is_refused_at_once():
    # cattrs iterates any string given for a list: 10 MB took minutes of the event loop.
    server = build_server()
    try:
        started = time.monotonic()
        params = {"notebookDocument": {"uri": "file:///n.ipynb"}, "cellTextDocuments": "x" * BIG}
        message = {"jsonrpc": "2.0", "method": "notebookDocument/didClose", "params": params}
        assert server.protocol.structure_message(message).jsonrpc == "answered"  # refused
        assert time.monotonic() - started < 1.0
    finally:
        server.stop_worker()


class Collect:
    """A writer that keeps what the server sends."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def close(self) -> None:
        pass


async def test_notifications_leave_no_future_behind():
    # pygls kept one future per didChange in _request_futures for as long as the server ran.
    server = build_server()
    protocol = server.protocol
    protocol.set_writer(Collect())
    try:

        def send(message: dict) -> None:
            protocol.handle_body(json.dumps({"jsonrpc": "2.0", **message}).encode())

        init = {"processId": None, "rootUri": None, "capabilities": {}}
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {**init, "initializationOptions": {"enable": False}},
            }
        )
        doc = {"uri": "file:///t/a.py", "languageId": "python", "version": 1, "text": "x = 1\n"}
        send({"method": "textDocument/didOpen", "params": {"textDocument": doc}})
        for version in range(2, 502):
            at = {"line": 0, "character": 0}
            change = {"range": {"start": at, "end": at}, "text": "a"}
            send(
                {
                    "method": "textDocument/didChange",
                    "params": {
                        "textDocument": {"uri": doc["uri"], "version": version},
                        "contentChanges": [change],
                    },
                }
            )
        await asyncio.sleep(0.1)
        assert server.document(doc["uri"]).version == 501  # the edits were applied
        assert len(protocol._request_futures) < 5
    finally:
        server.stop_worker()
