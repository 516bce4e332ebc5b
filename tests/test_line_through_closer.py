"""A suggestion that writes the line through the editor's auto-closed `)`, end to end: the real
server over stdio with Qwen2.5-Coder-0.5B (the registry GGUF), a Go test being written in
`func TestSub(|)`. The item replaces the line's rest with the whole new line from the cursor;
typing into it and stepping over the `)` are served from the type-through cache, and accepting
it whole from the precompute of what follows."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
from engines import QWEN_GGUF, need
from lsp_session import edit, inline_params, open_doc, start, stats, stop
from lsprotocol import types

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

CALC = """package calc

// Add returns the sum of a and b.
func Add(a, b int) int { return a + b }

// Sub returns a minus b.
func Sub(a, b int) int { return a - b }
"""
TESTS = """package calc

import "testing"

func TestAdd(t *testing.T) {
\tif got := Add(2, 3); got != 5 {
\t\tt.Errorf("Add(2, 3) = %d, want 5", got)
\t}
}

func TestSub()
"""
ROW = TESTS.split("\n").index("func TestSub()")
COLUMN = len("func TestSub(")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("calc")
    (root / "calc.go").write_text(CALC)
    (root / "calc_test.go").write_text(TESTS)
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(workspace):
    model = need(QWEN_GGUF, "Qwen2.5-Coder GGUF (../shared/models/fetch.sh)")
    options = {
        "model": {"path": str(model)},
        "completion": {"maxNewTokens": 24, "firstResponseMs": 0, "alternatives": 1},
    }
    client = await start("visual_studio_code", options, root=workspace)
    yield client
    await stop(client)


async def items_at(client, uri: str, character: int) -> list[types.InlineCompletionItem]:
    result = await client.text_document_inline_completion_async(inline_params(uri, ROW, character))
    return list(result.items) if result else []


async def test_the_line_through_the_closer_replaces_the_rest_and_types_through(client, workspace):
    uri = (workspace / "calc_test.go").as_uri()
    open_doc(client, uri, TESTS, language="go")
    items = await items_at(client, uri, COLUMN)
    assert items, "Qwen suggests a parameter list here"
    item = items[0]
    end = types.Position(ROW, COLUMN + 1)  # the line's end, after the editor's `)`
    assert item.range == types.Range(start=types.Position(ROW, COLUMN), end=end)
    assert item.insert_text == "t *testing.T) {"  # the `)` once, the line past it
    calls = (await stats(client))["modelCalls"]

    # The completion popup's item (from the type-through cache) is the same edit.
    popup = await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(ROW, COLUMN),
        )
    )
    assert [(i.text_edit.new_text, i.text_edit.range) for i in popup.items] == [
        (item.insert_text, item.range)
    ]

    # Typed `t *`: the rest comes from the type-through cache, still over the `)`.
    edit(client, uri, 2, (ROW, COLUMN), (ROW, COLUMN), "t *")
    items = await items_at(client, uri, COLUMN + 3)
    assert [(i.insert_text, i.range.end) for i in items] == [
        ("testing.T) {", types.Position(ROW, COLUMN + 4))
    ]
    assert (await stats(client))["modelCalls"] == calls

    # The editor stepped over its `)` (the document as it was, the cursor after the `)`):
    # the rest of the line, an insertion now, still from the cache.
    edit(client, uri, 3, (ROW, COLUMN + 3), (ROW, COLUMN + 3), "testing.T")
    past = COLUMN + len("t *testing.T)")
    items = await items_at(client, uri, past)
    at = types.Position(ROW, past)
    assert [(i.insert_text, i.range) for i in items] == [(" {", types.Range(start=at, end=at))]
    assert (await stats(client))["modelCalls"] == calls


async def test_accepting_the_whole_line_is_served_by_the_precompute(client, workspace):
    uri = (workspace / "calc_test.go").as_uri() + "?accept"
    open_doc(client, uri, TESTS, language="go")
    items = await items_at(client, uri, COLUMN)
    assert items and items[0].insert_text.endswith(") {")
    numbers = await stats(client)
    # Tab: the item's range, the editor's `)`, replaced by its text.
    edit(client, uri, 2, (ROW, COLUMN), (ROW, COLUMN + 1), items[0].insert_text)
    after = await items_at(client, uri, COLUMN + len(items[0].insert_text))
    assert after and after[0].insert_text.startswith("\n")  # the test's body, below the header
    now = await stats(client)
    # The precompute of what follows the accepted line answers it (joined or from its cache).
    assert now["precomputeCalls"] >= max(1, numbers["precomputeCalls"])
    assert now["modelCalls"] == numbers["modelCalls"]
