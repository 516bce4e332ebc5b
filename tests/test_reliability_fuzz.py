"""Protocol fuzzing of the real server over stdio: no crash, no hang, every request answered."""

from __future__ import annotations

import time

import pytest

from memosight_lsp.bench import fuzz
from memosight_lsp.bench.stdio import StdioServer, encode, python_env
from memosight_lsp.server.main import build_server

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


def test_the_issues_short_frame_is_logged_and_the_next_request_answered(tmp_path):
    log = tmp_path / "server.log"
    with open(log, "wb") as err:
        server = StdioServer(env=python_env({"XDG_CACHE_HOME": str(tmp_path)}), stderr=err)
        try:
            init = {"processId": None, "rootUri": None, "capabilities": {}}
            assert server.request(1, "initialize", init, 60) is not None
            server.notify("initialized", {})
            server.write(b"Content-Length: 5\r\n\r\nabc")  # 3 bytes of the 5 announced
            started = time.monotonic()
            answer = server.request(2, "memosight/stats", {}, 10)
            assert answer is not None and "result" in answer
            assert time.monotonic() - started < 10
            # The same for a lie far past the body, and for a header line split in two writes.
            server.write(b'Content-Length: 900000\r\n\r\n{"jsonrpc"')
            request = encode({"jsonrpc": "2.0", "id": 3, "method": "memosight/stats"})
            server.write(request[:9])
            time.sleep(0.2)
            server.write(request[9:])
            assert server.wait_for(3, 10) is not None
            assert server.stop() == 0
        finally:
            server.kill()
    text = log.read_text()
    assert text.count("next header began after 3; dropped them and resynchronised") == 1
    assert "next header began after 10" in text
