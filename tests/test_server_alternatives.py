"""completion.alternatives through the real server over stdio: several distinct inline items
where the tiny model hesitates, the first one the same as with alternatives off."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsp_session import inline_params, open_doc, start, stop, tiny_options
from lsprotocol import types

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

# The tiny random model's runner-ups at this cursor are nearly as likely as its choice.
DOC = "def add(a, b):\n    "
CURSOR = types.Position(line=1, character=4)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_model_dir):
    client = await start("visual_studio_code", tiny_options(tiny_model_dir))
    yield client
    await stop(client)


async def items(client, uri: str) -> list[str]:
    result = await asyncio.wait_for(
        client.text_document_inline_completion_async(
            inline_params(uri, CURSOR.line, CURSOR.character)
        ),
        60,
    )
    assert isinstance(result, types.InlineCompletionList)
    for item in result.items:
        assert item.range == types.Range(start=CURSOR, end=CURSOR)
    return [item.insert_text for item in result.items]


def configure(client, **completion) -> None:
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"memosight": {"completion": completion}})
    )


async def test_alternatives_are_distinct_and_the_first_item_is_unchanged(client):
    uri = "file:///e2e/alternatives.py"
    open_doc(client, uri, DOC)
    many = await items(client, uri)
    assert 1 < len(many) <= 3, many
    trimmed = [text.rstrip() for text in many]
    for k, text in enumerate(trimmed):
        assert text.strip(), many
        others = trimmed[:k] + trimmed[k + 1 :]
        assert not any(o.startswith(text) or text.startswith(o) for o in others), many

    configure(client, alternatives=1)  # settings changes clear the caches: the model runs again
    assert await items(client, uri) == many[:1]

    completion = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=CURSOR)
    )
    assert [item.text_edit.new_text for item in completion.items] == many[:1]

    configure(client, alternatives=2)
    assert await items(client, uri) == many[:2]


async def test_a_type_through_hit_gives_the_first_item_alone(client):
    uri = "file:///e2e/alternatives_typed.py"
    configure(client, alternatives=3)
    open_doc(client, uri, DOC)
    first, *_ = await items(client, uri)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=CURSOR, end=CURSOR), text=first[0]
                )
            ],
        )
    )
    result = await client.text_document_inline_completion_async(
        inline_params(uri, CURSOR.line, CURSOR.character + 1)
    )
    assert [item.insert_text for item in result.items] == [first[1:]]
