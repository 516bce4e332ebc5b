"""Pre-warm and the latency report through the real server over stdio (pytest-lsp): a buffer
opened (or a cursor shown with memosight/cursor) is prefilled in the background, its first
completion reuses that, and the suggestion is the one the server gives without pre-warm."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_session import inline, open_doc, start, stats, stop, tiny_options
from tiny_models import STDLIB

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

# A document whose end is a cursor in a function body, as a buffer just opened may be.
LINES = (STDLIB / "textwrap.py").read_text().split("\n")[:150]
DOC = "\n".join(LINES) + "\n\ndef widest(lines):\n    "
END = (DOC.count("\n"), 4)
SECOND = "\n".join(LINES[:120]) + "\n\ndef shortest(lines):\n    return \n\n\nx = 1\n"
SECOND_CURSOR = (121, 11)  # after `return `, not the end of the document


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_model_dir):
    client = await start("neovim", tiny_options(tiny_model_dir))
    yield client
    await stop(client)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def unwarmed(tiny_model_dir):
    """completion.speculative false: plain greedy decoding, which keeps no cache to pre-warm
    (the same tokens as speculative decoding, which the engine tests check)."""
    client = await start("neovim", tiny_options(tiny_model_dir, speculative=False))
    yield client
    await stop(client)


async def numbers_when(client, predicate, timeout: float = 60.0) -> dict:
    """memosight/stats once `predicate` holds for it."""
    deadline = time.monotonic() + timeout
    while not predicate(numbers := await stats(client)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"stats never matched: {numbers}")
        await asyncio.sleep(0.05)
    return numbers


async def test_did_open_prewarms_and_the_first_completion_reuses_it(client, unwarmed):
    uri = "file:///latency/opened.py"
    open_doc(client, uri, DOC)
    warmed = await numbers_when(client, lambda n: n["prewarms"] >= 1 and n["state"] == "ready")
    await numbers_when(client, lambda n: n["prewarmedTokens"] > 0)
    before = warmed["reusedPromptTokens"]
    text = await inline(client, uri, *END)
    after = await stats(client)
    assert after["modelCalls"] == warmed["modelCalls"] + 1
    assert after["reusedPromptTokens"] - before > 0  # the pre-warmed prompt
    # The pre-warm at didOpen guessed the cursor (the end of the file): it pins no head, the
    # completion packs its own (a later prepare, its precompute's, may already reuse it).
    assert warmed["latency"]["stablePrompts"]["buffers"] == 0
    assert after["latency"]["stablePrompts"]["packed"] >= 1
    # The same suggestion from a server that pre-warms nothing.
    open_doc(unwarmed, uri, DOC)
    plain = await inline(unwarmed, uri, *END)
    assert text == plain
    cold = await stats(unwarmed)
    assert cold["prewarms"] == 0 and cold["reusedPromptTokens"] == 0


async def test_memosight_cursor_prewarms_at_that_cursor(client):
    uri = "file:///latency/cursor.py"
    before = await numbers_when(client, lambda n: n["state"] == "ready")
    open_doc(client, uri, SECOND)  # pre-warms the end of the document
    opened = await numbers_when(client, lambda n: n["prewarms"] >= before["prewarms"] + 1)
    line, character = SECOND_CURSOR
    client.protocol.notify(
        "memosight/cursor",
        {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}},
    )
    warmed = await numbers_when(client, lambda n: n["prewarms"] >= opened["prewarms"] + 1)
    await inline(client, uri, line, character)
    after = await stats(client)
    assert after["modelCalls"] == warmed["modelCalls"] + 1
    # The prompt at that cursor was prefilled ahead and its completion starts from it.
    assert after["reusedPromptTokens"] - warmed["reusedPromptTokens"] > 100


async def test_stats_carry_the_latency_report(client):
    numbers = await numbers_when(client, lambda n: n["state"] == "ready")
    report = numbers["latency"]
    assert report["firstResponseMs"] == 0  # tiny_options: no deadline
    assert set(report) >= {
        "firstResponseMs",
        "promptTokens",
        "maxPromptTokens",
        "suffixTokens",
        "prefillChunk",
        "prefillTokensPerS",
        "prefillRate",
        "stablePrompts",
    }
    assert report["prefillRate"]["tokensPerS"] > 0  # measured at load
    assert report["prefillRate"]["samples"] >= 1
    # No deadline: the whole budget in one pass.
    assert report["promptTokens"] == report["maxPromptTokens"] and report["prefillChunk"] == 0
    assert set(report["stablePrompts"]) == {"buffers", "reused", "packed"}
    for key in ("partialAnswers", "prewarms", "prewarmedTokens", "reusedPromptTokens"):
        assert isinstance(numbers[key], int)


async def test_a_deadline_answers_early_and_the_rest_arrives_in_the_type_through_cache():
    """firstResponseMs 1: the request answers with the first text verified after it (never
    empty: the editor would show nothing while the user waits), decoding goes on, the server
    tells the client the suggestion grew (memosight/completionUpdated), and asking again at the
    same cursor serves the whole suggestion from the type-through cache, without a model call.
    The embedded model: a random one may never write more than its first word."""
    options = {"completion": {"firstResponseMs": 1, "maxNewTokens": 24, "multiline": "always"}}
    client = await start("neovim", options)
    try:
        uri = "file:///latency/deadline.py"
        open_doc(client, uri, DOC)
        ready = await numbers_when(client, lambda n: n["state"] == "ready")
        early = await inline(client, uri, *END)
        answered = await stats(client)
        assert early, "an early answer must not be blank"
        assert answered["partialAnswers"] == 1
        assert answered["modelCalls"] == ready["modelCalls"] + 1
        done = await numbers_when(client, lambda n: n["meanTokens"] is not None)  # decoded on
        deadline = time.monotonic() + 30
        while not client.updates and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        (update,) = client.updates
        assert update["textDocument"] == {"uri": uri, "version": 1}
        assert (update["position"]["line"], update["position"]["character"]) == END
        whole = await inline(client, uri, *END)
        after = await stats(client)
        assert whole == update["text"] and len(whole) > len(early)
        assert whole.startswith(early)
        assert after["modelCalls"] == done["modelCalls"]  # no new call: the cache answered
        assert after["typeThroughHits"] == done["typeThroughHits"] + 1
        assert after["longerPushed"] == 1
    finally:
        await stop(client)
