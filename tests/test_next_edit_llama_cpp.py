"""memosight/nextEdit through a real llama.cpp server (started here on loopback) with
Qwen2.5-Coder-0.5B-Instruct: the real language server with model.backend llama.cpp answers a
non-rename next edit from the model (the ChatML prompt as a raw /completion), well-formed and
within completion.maxWaitMs; every prompt format goes through the engine; and with the engine
stopped the answer is empty with a reason while the server keeps serving."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from engines import QWEN_GGUF, EngineProcess, llama_server
from lsp_session import (
    NEXT_EDIT_DOC,
    NEXT_EDIT_TYPED,
    assert_well_formed_next_edit,
    edit,
    next_edit,
    next_edit_after_typing,
    open_doc,
    start,
    stats,
    stop,
)

from memosight_lsp.engines.llama_cpp import LlamaCppClient
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import NextEdit, NextEditRequest, rewrite_budget
from memosight_lsp.next_edit.remote import RemoteNextEditor
from memosight_lsp.pipeline.engine_backend import EngineBackend

pytestmark = pytest.mark.slow
in_module_loop = pytest.mark.asyncio(loop_scope="module")

MAX_WAIT_MS = 20_000
MARGIN_S = 5.0  # the request's own overhead on top of maxWaitMs, on a busy 2-core machine


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> EngineProcess:
    process = llama_server(QWEN_GGUF, tmp_path_factory.mktemp("llama-logs")).start()
    yield process
    process.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(engine):
    options = {
        "model": {"backend": "llama.cpp", "url": engine.url, "timeoutMs": 30_000},
        "completion": {"maxWaitMs": MAX_WAIT_MS, "precomputeNext": False},
    }
    client = await start("neovim", options)
    yield client
    await stop(client)


@in_module_loop
async def test_a_next_edit_comes_from_the_engine_well_formed_and_in_time(client):
    # No rename: the engine's rewrite answers.
    answer, waited = await next_edit_after_typing(
        client, "file:///r/scale.py", MAX_WAIT_MS / 1000 + 60
    )
    assert answer["source"] == "model", answer
    assert answer["model"] == QWEN_GGUF.name
    assert answer["stats"]["family"] == "chat"  # Qwen: ChatML text over the raw endpoint
    assert answer["stats"]["engine"]["name"] == "llama.cpp"
    assert_well_formed_next_edit(answer, NEXT_EDIT_TYPED)
    # The engine's own count of what it generated, within the bound sent.
    assert 0 < answer["stats"]["newTokens"] <= rewrite_budget(answer["stats"]["draftTokens"])
    assert waited <= MAX_WAIT_MS / 1000 + MARGIN_S
    numbers = await stats(client)
    assert numbers["nextEditModelCalls"] >= 1


def test_every_prompt_format_goes_through_the_engine(engine):
    history = EditHistory()
    history.opened("u", NEXT_EDIT_DOC)
    changed = NEXT_EDIT_TYPED
    history.changed("u", changed)
    editor = RemoteNextEditor(EngineBackend(LlamaCppClient(engine.url), timeout_s=30))
    for family in ("chat", "plain", "zeta", "sweep"):
        request = NextEditRequest(
            text=changed,
            cursor_line=1,
            cursor=changed.index("list()") + 6,
            edits=tuple(history.recent("u")),
            path="scale.py",
            language_id="python",
            max_wait_ms=MAX_WAIT_MS,
            prompt_format=family,
        )
        result = editor.predict(request)
        assert isinstance(result, NextEdit), (family, result)
        assert result.family == family
        assert result.new_tokens <= rewrite_budget(result.draft_tokens)
        assert result.hunks or result.reason


@in_module_loop
async def test_with_the_engine_stopped_the_answer_is_empty_with_a_reason(client, engine):
    uri = "file:///r/down.py"
    open_doc(client, uri, NEXT_EDIT_DOC)
    edit(client, uri, 2, (1, 13), (1, 15), "{}")
    engine.stop()
    started = time.monotonic()
    answer = await asyncio.wait_for(next_edit(client, uri, 1, 15), 30)
    assert time.monotonic() - started < 5  # refused at once, not a hang
    assert answer["edits"] == [] and answer["source"] is None
    assert "engine unavailable" in answer["reason"] or "engine error" in answer["reason"]
    assert "connection refused" in answer["reason"]
    numbers = await asyncio.wait_for(stats(client), 10)  # the server keeps serving
    assert numbers["nextEditRequests"] >= 2
