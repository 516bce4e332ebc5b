"""Completions through a real vLLM CPU server (its own virtual environment, SmolLM2-135M as a
Hugging Face folder, started here on loopback: ~130 s): token-id prompts from vLLM's tokenizer,
the prefix cache on keystrokes, a superseded stream aborted, a wrong model name."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import pytest_asyncio
from engines import SMOLLM_HF, EngineProcess, vllm_server
from lsp_session import inline, open_doc, start, stats, stop, wait_for_state
from lsprotocol import types

from memosight_lsp.engines import Cancelled, GenerateRequest, PromptPieces
from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.vllm import VllmClient, prefix_cache_counts

pytestmark = pytest.mark.slow
in_module_loop = pytest.mark.asyncio(loop_scope="module")

FIB = (
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    "    if n < 2:\n        return n\n    return "
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    process = vllm_server(SMOLLM_HF, tmp_path_factory.mktemp("vllm-logs")).start(timeout_s=600)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ws")


def options(engine: EngineProcess, **model) -> dict:
    return {
        "model": {"backend": "vllm", "url": engine.url, "timeoutMs": 30_000, **model},
        "completion": {"maxNewTokens": 16, "precomputeNext": False},
        "context": {"budgetTokens": 512},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(engine, workspace):
    client = await start("visual_studio_code", options(engine), root=workspace)
    yield client
    await stop(client)


def test_the_probe_finds_the_model_its_context_and_no_fim(engine):
    backend = VllmClient(engine.url)
    info = backend.probe(engine_http.deadline_in(30))
    assert info.model == "smollm2" and info.context_length == 2048
    assert info.token_ids and info.fim is None  # SmolLM2 has no FIM tokens
    assert "prefix-only" in info.notes[0]
    assert 2.5 < info.chars_per_token < 6
    ids, count = backend.prompt(
        GenerateRequest(
            prompt=PromptPieces(text="def f():", prefix="def f():", suffix=""),
            max_tokens=1,
            deadline=engine_http.deadline_in(10),
        ),
        engine_http.deadline_in(10),
    )
    assert isinstance(ids, list) and count == len(ids) > 2


@in_module_loop
async def test_completions_and_the_prefix_cache_on_the_next_keystroke(client, engine, workspace):
    uri = (workspace / "fib.py").as_uri()
    # Long enough to fill several of vLLM's KV blocks (the prefix cache keeps whole blocks).
    head = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n\n" for i in range(24))
    open_doc(client, uri, head + FIB)
    row = head.count("\n") + 4
    text = await inline(client, uri, row, 11)
    assert text and "fibonacci" in text
    typed = ")" if not text.startswith(")") else "]"  # not typing through: a new prompt
    queries0, hits0 = prefix_cache_counts(VllmClient(engine.url).metrics(time.monotonic() + 10))
    before = await stats(client)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(row, 11), end=types.Position(row, 11)),
                    text=typed,
                )
            ],
        )
    )
    await inline(client, uri, row, 12)
    after = await stats(client)
    assert after["modelCalls"] == before["modelCalls"] + 1
    queries1, hits1 = prefix_cache_counts(VllmClient(engine.url).metrics(time.monotonic() + 10))
    assert hits1 - hits0 > 0.5 * (queries1 - queries0) > 0  # vLLM's own counters
    cached = after["engineCachedTokens"] - before["engineCachedTokens"]
    assert cached > 0  # usage.prompt_tokens_details (--enable-prompt-tokens-details)
    assert after["engineErrors"] == 0 and after["model"] == "smollm2"


def test_a_cancelled_stream_is_aborted_by_the_engine(engine):
    backend = VllmClient(engine.url)
    backend.probe(engine_http.deadline_in(30))
    generated = backend.metrics(engine_http.deadline_in(10))["vllm:generation_tokens_total"]
    request = GenerateRequest(
        prompt=PromptPieces(text="# An essay about prime numbers\n\n", prefix="", suffix=""),
        max_tokens=1500,
        deadline=engine_http.deadline_in(60),
    )
    flag = threading.Event()
    threading.Timer(1.0, flag.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        backend.generate(request, on_text=lambda text: False, cancelled=flag.is_set)
    assert time.monotonic() - started < 1.3
    time.sleep(3)  # what it would have generated meanwhile, had it gone on
    after = backend.metrics(engine_http.deadline_in(10))
    assert after["vllm:num_requests_running"] == 0
    # Aborted: a few dozen tokens (checked by hand: 23), not the 1,500 asked for.
    assert after["vllm:generation_tokens_total"] - generated < 300


@in_module_loop
async def test_a_wrong_model_name_is_one_clear_status(engine, workspace):
    client = await start("neovim", options(engine, name="gpt-4o"), root=workspace)
    try:
        uri = (workspace / "wrong.py").as_uri()
        open_doc(client, uri, FIB)
        assert await inline(client, uri, 4, 11) is None
        status = await wait_for_state(client, "error", 30)
        assert "does not serve model 'gpt-4o'" in status["message"]
        assert "smollm2" in status["message"]
    finally:
        await stop(client)
