"""The real server over stdio, driven by pytest-lsp with real editors' capabilities."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsp_session import (
    after_insert,
    context,
    edit,
    inline,
    inline_params,
    open_doc,
    start,
    stats,
    stop,
    tiny_options,
)
from lsprotocol import types
from lsprotocol.converters import get_converter

from memosight_lsp.bench.lsp_client import added_text

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

DOC = "def add(a, b):\n    "
CURSOR = (1, 4)


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=["neovim", "visual_studio_code"]
)
async def client(request, tiny_model_dir):
    client = await start(request.param, tiny_options(tiny_model_dir))
    yield client
    await stop(client)


async def first_suggestion(client, uri: str) -> str:
    open_doc(client, uri, DOC)
    text = await inline(client, uri, *CURSOR)
    assert text, "the tiny model should suggest something here"
    return text


async def test_capabilities_are_advertised(client):
    caps = client.init_result
    assert caps.capabilities.inline_completion_provider is not None
    sync = caps.capabilities.text_document_sync
    assert sync.change == types.TextDocumentSyncKind.Incremental and sync.save
    assert caps.capabilities.completion_provider is not None
    assert caps.capabilities.workspace.workspace_folders.supported


async def test_inline_completion_appears_at_the_cursor(client):
    uri = "file:///e2e/appears.py"
    open_doc(client, uri, DOC)
    result = await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(*CURSOR),
            context=types.InlineCompletionContext(
                trigger_kind=types.InlineCompletionTriggerKind.Invoked
            ),
        )
    )
    item = result.items[0]
    assert item.insert_text.strip()
    assert item.range.start == item.range.end == types.Position(*CURSOR)
    numbers = await stats(client)
    assert numbers["modelCalls"] >= 1 and numbers["state"] == "ready"
    assert numbers["meanTokens"] > 0 and numbers["p50Ms"] > 0


async def test_a_suggestion_before_code_on_its_line_replaces_that_code_with_itself_and_it(client):
    # `max(|)` with a comment after: each item replaces the line's rest (up to its end in the
    # client's units, the astral character counting twice in UTF-16) with the suggestion
    # followed by that rest, so clients that draw a ranged item over the line show it right.
    rest = ") # é😀"
    cursor = types.Position(1, len("    return max("))
    items = []
    for name, newline in (("lf", "\n"), ("crlf", "\r\n")):  # the range ends before a `\r`
        uri = f"file:///e2e/before_code_{name}.py"
        open_doc(client, uri, f"def add(a, b):{newline}    return max({rest}{newline}")
        result = await client.text_document_inline_completion_async(
            inline_params(uri, cursor.line, cursor.character)
        )
        assert result is not None and result.items, "the tiny model should suggest something"
        items += result.items
    encoding = client.init_result.capabilities.position_encoding or "utf-16"
    width = {
        "utf-8": len(rest.encode()),
        "utf-16": len(rest.encode("utf-16-le")) // 2,
        "utf-32": len(rest),
    }[encoding]
    for item in items:
        assert item.range == types.Range(
            start=cursor, end=types.Position(cursor.line, cursor.character + width)
        )
        added = item.insert_text.removesuffix(rest)
        assert added != item.insert_text and added.strip() and "\n" not in added
        if encoding == "utf-16":  # the benches' reading of an item (their clients ask for none)
            assert added_text(get_converter().unstructure(item)) == added


async def test_type_through_serves_the_rest_with_zero_model_calls(client):
    uri = "file:///e2e/type_through.py"
    suggestion = await first_suggestion(client, uri)
    before = await stats(client)
    line, character = CURSOR
    version = 1
    # Type the suggestion character by character (at most 4), then backspace once.
    typed = suggestion[: min(4, len(suggestion) - 1)]
    for k, ch in enumerate(typed, start=1):
        version += 1
        edit(client, uri, version, (line, character), (line, character), ch)
        line, character = after_insert(line, character, ch)
        assert await inline(client, uri, line, character) == suggestion[k:]
    version += 1
    edit(client, uri, version, (line, character - 1), (line, character), "")
    assert await inline(client, uri, line, character - 1) == suggestion[len(typed) - 1 :]
    after = await stats(client)
    assert after["modelCalls"] == before["modelCalls"]
    assert after["typeThroughHits"] == before["typeThroughHits"] + len(typed) + 1
    assert after["typeThroughP99Ms"] < 50


async def test_accepting_the_suggestion_is_served_by_the_precompute(client):
    uri = "file:///e2e/accept.py"
    suggestion = await first_suggestion(client, uri)
    numbers = await stats(client)
    edit(client, uri, 2, CURSOR, CURSOR, suggestion)
    cursor = after_insert(*CURSOR, suggestion)
    await inline(client, uri, *cursor)
    after = await stats(client)
    # The precompute may still wait for the worker when the first answer arrives (calibration
    # runs after a first answer); the accepted request joins it or is served from it.
    assert after["precomputeCalls"] >= max(1, numbers["precomputeCalls"])
    assert after["modelCalls"] == numbers["modelCalls"]


async def test_an_edit_elsewhere_invalidates_the_suggestion(client):
    uri = "file:///e2e/elsewhere.py"
    suggestion = await first_suggestion(client, uri)
    before = await stats(client)
    edit(client, uri, 2, (0, 0), (0, 0), "import os\n")
    edit(client, uri, 3, (2, 4), (2, 4), suggestion[0])
    await inline(client, uri, 2, 5)
    after = await stats(client)
    assert after["typeThroughHits"] == before["typeThroughHits"]
    assert after["modelCalls"] == before["modelCalls"] + 1


async def test_completion_fallback_returns_one_item_that_sorts_first(client):
    uri = "file:///e2e/fallback.py"
    suggestion = await first_suggestion(client, uri)  # warms the type-through cache
    params = types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(*CURSOR)
    )
    result = await client.text_document_completion_async(params)
    assert result.is_incomplete and len(result.items) == 1
    item = result.items[0]
    assert item.text_edit.new_text == suggestion
    assert item.label == suggestion.split("\n")[0].strip()[:60] or len(item.label) <= 60
    assert item.sort_text == "\u0000" and item.preselect


async def test_context_shows_the_prompt(client):
    uri = "file:///e2e/context.py"
    open_doc(client, uri, DOC + "\nprint(add(1, 2))\n")
    result = await context(client, uri, *CURSOR)
    assert result["reason"] is None
    assert "def add(a, b):" in result["prompt"] and result["promptTokens"] > 0
    kinds = [s["kind"] for s in result["snippets"]]
    assert kinds == ["prefix", "suffix"]
    assert result["snippets"][0]["range"]["end"] == {"line": 1, "character": 4}


async def test_newest_request_wins(client):
    uri = "file:///e2e/newest.py"
    open_doc(client, uri, "x = 1\n" * 50 + DOC)
    first = asyncio.ensure_future(inline(client, uri, 50, 2))
    await asyncio.sleep(0)
    second = await inline(client, uri, 51, 4)
    assert second
    assert await first is None or (await stats(client))["superseded"] == 0
