"""memosight/nextEdit through the real server over stdio: answered within bounds with well-formed
edits or an empty answer with a reason; bad params get an error and the server keeps serving."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_session import edit, open_doc, raw_request, start, stats, stop, tiny_options
from pygls.exceptions import JsonRpcException

from memosight_lsp.server.features import plain

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

DOC = (
    "def scale(values, factor):\n"
    "    result = []\n"
    "    for value in values:\n"
    "        result.append(value * factor)\n"
    "    return result\n"
)
MAX_WAIT_MS = 4000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_model_dir):
    client = await start("neovim", tiny_options(tiny_model_dir, maxWaitMs=MAX_WAIT_MS))
    yield client
    await stop(client)


async def next_edit(client, uri: str, line: int, character: int) -> dict:
    params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
    return plain(await client.protocol.send_request_async("memosight/nextEdit", params))


def in_document(position: dict, lines: list[str]) -> bool:
    line, character = position["line"], position["character"]
    return 0 <= line < len(lines) + 1 and 0 <= character <= len([*lines, ""][line])


async def test_after_a_rename_the_answer_is_bounded_and_well_formed(client):
    uri = "file:///r/scale.py"
    open_doc(client, uri, DOC)
    # Rename `result` at its definition: select it, type the new name.
    edit(client, uri, 2, (1, 4), (1, 10), "")
    for i, char in enumerate("out"):
        edit(client, uri, 3 + i, (1, 4 + i), (1, 4 + i), char)
    started = time.monotonic()
    answer = await asyncio.wait_for(next_edit(client, uri, 1, 7), 120)
    waited = time.monotonic() - started
    lines = DOC.replace("    result = []", "    out = []").split("\n")
    assert answer["window"] is not None and answer["model"]
    assert in_document(answer["window"]["start"], lines)
    assert in_document(answer["window"]["end"], lines)
    for proposal in answer["edits"]:
        assert isinstance(proposal["newText"], str)
        start, end = proposal["range"]["start"], proposal["range"]["end"]
        assert in_document(start, lines) and in_document(end, lines)
        assert (start["line"], start["character"]) <= (end["line"], end["character"])
    assert answer["edits"] or answer["reason"]
    assert answer["stats"]["newTokens"] <= answer["stats"]["draftTokens"] * 5 // 4 + 16
    # maxWaitMs bounds the decoding; the load and the prefill come on top of it.
    assert answer["stats"]["decodeMs"] <= MAX_WAIT_MS + 1000
    assert answer["latencyMs"] <= waited * 1000 + 50


async def test_nothing_to_go_on_is_an_empty_answer_with_a_reason(client):
    uri = "file:///r/untouched.py"
    open_doc(client, uri, DOC)
    answer = await next_edit(client, uri, 0, 0)
    assert answer["edits"] == [] and "no recent edits" in answer["reason"]
    answer = await next_edit(client, "file:///r/never-opened.py", 0, 0)
    assert answer["edits"] == [] and "unknown document" in answer["reason"]


async def test_malformed_params_get_an_error_and_the_server_keeps_serving(client):
    for bad in ({"position": 3}, {"textDocument": {"uri": 5}, "position": {}}, None, [1]):
        with pytest.raises(JsonRpcException) as err:
            await raw_request(client, "memosight/nextEdit", bad)
        assert err.value.code == -32602
    numbers = await asyncio.wait_for(stats(client), 10)
    assert numbers["state"] in ("ready", "loading")
    answer = await next_edit(client, "file:///r/scale.py", 10**6, 10**6)  # clamped
    assert isinstance(answer["edits"], list)
