"""Completions through a real llama.cpp server (built from the registry's sdist, started here on
loopback) with Qwen2.5-Coder-0.5B: /infill with our snippets, the prefix cache across
keystrokes, type-through with no engine call, a superseded stream aborted, and the engine
stopped and restarted under a running language server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import pytest_asyncio
from engines import QWEN_GGUF, EngineProcess, llama_server
from lsp_session import inline, open_doc, start, stats, stop, wait_until
from lsprotocol import types

from memosight_lsp.engines import Cancelled, GenerateRequest, PromptPieces
from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.llama_cpp import LlamaCppClient
from memosight_lsp.engines.vllm import prometheus_totals

pytestmark = pytest.mark.slow
in_module_loop = pytest.mark.asyncio(loop_scope="module")

FIB = (
    'def fibonacci(n):\n    """The n-th Fibonacci number."""\n'
    "    if n < 2:\n        return n\n    return "
)
HELPERS = (
    "def add_all(values):\n    total = 0\n    for value in values:\n"
    "        total += value\n    return total\n"
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    process = llama_server(QWEN_GGUF, tmp_path_factory.mktemp("llama-logs")).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ws")
    (root / "helpers.py").write_text(HELPERS)
    return root


def options(engine: EngineProcess, **completion) -> dict:
    return {
        "model": {"backend": "llama.cpp", "url": engine.url, "timeoutMs": 30_000},
        "completion": {"maxNewTokens": 16, **completion},
        "context": {"budgetTokens": 384},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(engine, workspace):
    client = await start("neovim", options(engine, precomputeNext=False), root=workspace)
    yield client
    await stop(client)


def metrics(engine: EngineProcess) -> dict[str, float]:
    with urllib.request.urlopen(engine.url + "/metrics", timeout=10) as response:
        return prometheus_totals(response.read().decode())


def busy(engine: EngineProcess) -> bool:
    with urllib.request.urlopen(engine.url + "/slots", timeout=10) as response:
        return any(slot.get("is_processing") for slot in json.loads(response.read()))


def test_the_probe_finds_infill_fim_tokens_and_the_context(engine):
    info = LlamaCppClient(engine.url).probe(engine_http.deadline_in(30))
    assert info.infill
    assert info.fim is not None and info.fim.name == "qwen"
    assert info.context_length == 4096
    assert info.model == QWEN_GGUF.name
    assert 2.5 < info.chars_per_token < 6  # measured with the engine's own tokenizer


@in_module_loop
async def test_a_completion_comes_from_the_engine_with_its_cache_numbers(client, workspace):
    uri = (workspace / "fib.py").as_uri()
    open_doc(client, uri, FIB)
    text = await inline(client, uri, 4, 11)
    assert text and "fibonacci(n - 1)" in text.replace("n-1", "n - 1")
    numbers = await stats(client)
    assert numbers["model"] == QWEN_GGUF.name
    assert numbers["enginePrefilledTokens"] > 0  # llama.cpp's own timings.prompt_n
    assert numbers["engineErrors"] == 0


@in_module_loop
async def test_the_next_keystroke_is_prefilled_from_the_engines_cache(client, engine, workspace):
    uri = (workspace / "keys.py").as_uri()
    text = "import math\n\n\ndef area(radius):\n    return math."
    open_doc(client, uri, text)
    shown = await inline(client, uri, 4, 16) or ""
    # Not typing through, and not a word character (those are healed: the prompt would not
    # change): a prompt one character longer.
    typed = ")" if not shown.startswith(")") else "]"
    before = await stats(client)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(4, 16), end=types.Position(4, 16)),
                    text=typed,
                )
            ],
        )
    )
    await inline(client, uri, 4, 17)
    after = await stats(client)
    assert after["modelCalls"] == before["modelCalls"] + 1
    cached = after["engineCachedTokens"] - before["engineCachedTokens"]
    computed = after["enginePrefilledTokens"] - before["enginePrefilledTokens"]
    assert cached > 0
    assert cached / (cached + computed) > 0.8  # stable-first prompt: only the tail is new


@in_module_loop
async def test_typing_through_a_suggestion_asks_the_engine_nothing(client, engine, workspace):
    uri = (workspace / "through.py").as_uri()
    open_doc(client, uri, FIB)
    shown = await inline(client, uri, 4, 11)
    assert shown and len(shown) > 3
    await wait_until(lambda: not busy(engine), 30)
    before, engine_before = await stats(client), metrics(engine)
    line, column = 4, 11
    for i, ch in enumerate(shown[:3]):
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2 + i),
                content_changes=[
                    types.TextDocumentContentChangePartial(
                        range=types.Range(
                            start=types.Position(line, column), end=types.Position(line, column)
                        ),
                        text=ch,
                    )
                ],
            )
        )
        column += 1
        assert await inline(client, uri, line, column) == shown[i + 1 :]
    after, engine_after = await stats(client), metrics(engine)
    assert after["typeThroughHits"] - before["typeThroughHits"] == 3
    assert after["modelCalls"] == before["modelCalls"]
    for counter in ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"):
        assert engine_after[counter] == engine_before[counter], counter


def test_a_cancelled_stream_stops_the_engine(engine):
    backend = LlamaCppClient(engine.url)
    backend.probe(engine_http.deadline_in(30))
    request = GenerateRequest(
        prompt=PromptPieces(text="", prefix="# A long essay about prime numbers.\n\n", suffix=""),
        max_tokens=400,
        deadline=engine_http.deadline_in(60),
    )
    before = metrics(engine)["llamacpp:tokens_predicted_total"]
    flag = threading.Event()
    threading.Timer(1.0, flag.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        backend.generate(request, on_text=lambda text: False, cancelled=flag.is_set)
    assert time.monotonic() - started < 1.3
    deadline = time.monotonic() + 10
    while busy(engine) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not busy(engine)  # the slot was freed: the engine stopped generating for it
    predicted = metrics(engine)["llamacpp:tokens_predicted_total"] - before
    assert predicted < 200  # ~40 tokens/s here: it stopped near the cancel, not at 400


@in_module_loop
async def test_the_engine_stopped_and_restarted_mid_session(engine, workspace):
    client = await start("neovim", options(engine, precomputeNext=False), root=workspace)
    try:
        uri = (workspace / "restart.py").as_uri()
        open_doc(client, uri, FIB)
        # Served before the stop; the first answer of a cold engine on a busy machine may take
        # past completion.maxWaitMs (answered empty then): ask again.
        first, deadline = None, time.monotonic() + 60
        while not first and time.monotonic() < deadline:
            first = await inline(client, uri, 4, 11)
        assert first
        engine.stop()
        started = time.monotonic()
        assert await inline(client, uri, 4, 10) is None  # an empty answer, not a hang
        assert time.monotonic() - started < 3
        await wait_until(lambda: client.statuses[-1]["state"] == "error", 10)
        assert "connection refused" in client.statuses[-1]["message"]
        errors = [s for s in client.statuses if s["state"] == "error"]
        assert len(errors) == 1  # one status message
        engine.start()
        later = (workspace / "later.py").as_uri()  # a new state: the type-through cache has none
        open_doc(client, later, FIB)
        deadline = time.monotonic() + 30
        text = None
        while text is None and time.monotonic() < deadline:  # retried with backoff
            text = await inline(client, later, 4, 11)
            await asyncio.sleep(0.3)
        assert text
        assert client.statuses[-1]["state"] == "ready"
        numbers = await stats(client)
        assert numbers["engineUnavailable"] + numbers["engineErrors"] >= 1
    finally:
        await stop(client)
