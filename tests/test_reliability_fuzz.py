"""Protocol fuzzing of the real server over stdio: no crash, no hang, every request answered."""

from __future__ import annotations

import time

import pytest

from memosight_lsp.bench import fuzz
from memosight_lsp.bench.fuzz import BIG
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
