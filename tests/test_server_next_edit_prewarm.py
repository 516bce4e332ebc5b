"""The next-edit pre-warm through the real server over stdio: after an edit and a pause, the
model's answer reuses the prompt the pause prefilled (its `stats` and the server's counters say
how much) and is the answer a server with nextEdit.prewarm off gives."""

from __future__ import annotations

import asyncio

import pytest
from lsp_session import (
    NEXT_EDIT_DOC,
    edit,
    next_edit,
    open_doc,
    start,
    stats,
    stop,
    tiny_options,
    wait_for_state,
)
from tiny_models import save_tiny_model

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

URI = "file:///r/scale.py"
# What the model decides (timings and cache reuse aside).
SAME = ("promptTokens", "newTokens", "draftTokens", "stopReason", "complete", "unwrittenTokens")


async def typed_then_paused(client, pause_until) -> dict:
    """NEXT_EDIT_DOC opened, `list()` typed over `[]` key by key, the pause (until
    `pause_until(stats)` holds), then memosight/nextEdit at the end of what was typed."""
    await wait_for_state(client, "ready")
    open_doc(client, URI, NEXT_EDIT_DOC)
    edit(client, URI, 2, (1, 13), (1, 15), "")
    for i, char in enumerate("list()"):
        edit(client, URI, 3 + i, (1, 13 + i), (1, 13 + i), char)
    seen: list[dict] = []

    async def paused() -> bool:  # `pause_until` holds, and the counters stood still 0.5 s
        seen.append(await stats(client))
        await asyncio.sleep(0.5)
        return pause_until(seen[-1]) and len(seen) > 1 and seen[-1] == seen[-2]

    await wait_until_async(paused)
    return await asyncio.wait_for(next_edit(client, URI, 1, 19), 60)


async def wait_until_async(predicate, timeout: float = 60.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.05)


async def test_the_prewarmed_answer_is_the_cold_one_and_reuses_the_pause(tiny_model_dir):
    options = tiny_options(tiny_model_dir, maxWaitMs=20_000)
    cold_client = await start("neovim", {**options, "nextEdit": {"prewarm": False}})
    try:
        cold = await typed_then_paused(cold_client, lambda numbers: True)
        cold_numbers = await stats(cold_client)
    finally:
        await stop(cold_client)
    warm_client = await start("neovim", options)
    try:
        warm = await typed_then_paused(
            warm_client, lambda numbers: numbers["nextEditPrewarmedTokens"] > 0
        )
        warm_numbers = await stats(warm_client)
    finally:
        await stop(warm_client)

    assert cold["source"] == warm["source"] == "model"
    assert (warm["edits"], warm["window"], warm["reason"]) == (
        cold["edits"],
        cold["window"],
        cold["reason"],
    )
    assert {k: warm["stats"][k] for k in SAME} == {k: cold["stats"][k] for k in SAME}
    assert cold["stats"]["prewarmedTokens"] == 0 and cold_numbers["nextEditPrewarms"] == 0
    prompt = warm["stats"]["promptTokens"]
    # The pause prefilled the whole prompt: the request computes its last token only.
    assert warm["stats"]["reusedTokens"] == prompt - 1
    assert 0 < warm["stats"]["prewarmedTokens"] <= prompt - 1
    assert warm_numbers["nextEditPrewarms"] >= 1
    assert warm_numbers["nextEditPrewarmedTokens"] >= warm["stats"]["prewarmedTokens"]
    assert warm_numbers["nextEditReusedTokens"] == prompt - 1
    assert warm_numbers["nextEditReusedPrewarmedTokens"] == warm["stats"]["prewarmedTokens"]


async def test_the_prompts_head_is_prefilled_once_the_model_is_loaded(tmp_path):
    folder = save_tiny_model(tmp_path / "qwen-tiny")  # `qwen` in its name: the chat prompts
    client = await start("neovim", tiny_options(folder, maxWaitMs=20_000))
    try:
        await wait_for_state(client, "ready")

        async def head_prefilled() -> bool:  # before any document is opened or edited
            return (await stats(client))["nextEditHeadTokens"] > 0

        await wait_until_async(head_prefilled)
        head = (await stats(client))["nextEditHeadTokens"]
        answer = await typed_then_paused(client, lambda numbers: True)
        assert answer["source"] == "model" and answer["stats"]["reusedTokens"] >= head
        assert (await stats(client))["nextEditHeadTokens"] == head  # once per loaded model
    finally:
        await stop(client)
