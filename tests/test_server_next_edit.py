"""memosight/nextEdit through the real server over stdio: answered within bounds with well-formed
edits or an empty answer with a reason; bad params get an error and the server keeps serving.
A rename is followed up at once with no model (`"source": "rename"`; a string constant too,
`"source": "string"`): each next use offered in turn, applied as an editor applies it (its LSP
range, UTF-16 columns), in Python, TypeScript and Go, also while a serving engine that is down
serves."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsp_session import (
    NEXT_EDIT_DOC,
    NEXT_EDIT_TYPED,
    assert_well_formed_next_edit,
    edit,
    next_edit,
    next_edit_after_typing,
    open_doc,
    raw_request,
    start,
    stats,
    stop,
    tiny_options,
)
from pygls.exceptions import JsonRpcException

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

MAX_WAIT_MS = 4000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_model_dir):
    options = tiny_options(tiny_model_dir, maxWaitMs=MAX_WAIT_MS)
    client = await start("neovim", {**options, "languages": {"markdown": False}})
    yield client
    await stop(client)


async def test_after_an_edit_the_model_answer_is_bounded_and_well_formed(client):
    answer, waited = await next_edit_after_typing(client, "file:///r/scale.py", 120)
    assert answer["source"] == "model"
    assert answer["window"] is not None and answer["model"]
    assert_well_formed_next_edit(answer, NEXT_EDIT_TYPED)
    assert answer["stats"]["newTokens"] <= answer["stats"]["draftTokens"] * 5 // 4 + 16
    # maxWaitMs bounds the decoding; the load and the prefill come on top of it.
    assert answer["stats"]["decodeMs"] <= MAX_WAIT_MS + 1000
    assert answer["latencyMs"] <= waited * 1000 + 50


async def test_nothing_to_go_on_is_an_empty_answer_with_a_reason(client):
    uri = "file:///r/untouched.py"
    open_doc(client, uri, NEXT_EDIT_DOC)
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


class Buffer:
    """An open document edited as an editor does: each change sent with the next version."""

    def __init__(self, client, uri: str, text: str, language: str) -> None:
        self.client, self.uri, self.version = client, uri, 1
        open_doc(client, uri, text, language)

    def change(self, start: tuple[int, int], end: tuple[int, int], text: str) -> None:
        self.version += 1
        edit(self.client, self.uri, self.version, start, end, text)

    def rename(self, line: int, character: int, old: str, new: str) -> tuple[int, int]:
        """Select `old` there and type `new` over it, key by key; the cursor after it."""
        self.change((line, character), (line, character + len(old)), "")
        for i, char in enumerate(new):
            self.change((line, character + i), (line, character + i), char)
        return line, character + len(new)

    async def next_edit(self, cursor: tuple[int, int]) -> dict:
        return await asyncio.wait_for(next_edit(self.client, self.uri, *cursor), 30)

    def apply(self, answer: dict) -> tuple[int, int]:
        """Apply the first proposed edit at its range; the cursor after it."""
        proposal = answer["edits"][0]
        start, end = proposal["range"]["start"], proposal["range"]["end"]
        self.change((start["line"], start["character"]), (end["line"], end["character"]),
                    proposal["newText"])  # fmt: skip
        return start["line"], start["character"] + len(proposal["newText"])


def proposal_of(answer: dict) -> tuple[int, int, int, str]:
    """(line, start character, end character, new text) of the one proposed edit."""
    assert answer["source"] == "rename" and answer["window"] is None and answer["model"] is None
    (proposal,) = answer["edits"]
    start, end = proposal["range"]["start"], proposal["range"]["end"]
    assert start["line"] == end["line"]
    return start["line"], start["character"], end["character"], proposal["newText"]


RENAMED = """def mean(values):
    total = 0
    for value in values:
        total += value
    label = "total"  # total, in words
    return total / len(values)


def other(total):
    return total
"""


async def test_a_rename_offers_each_next_use_in_turn_then_nothing(client):
    before = await stats(client)
    buffer = Buffer(client, "file:///r/mean.py", RENAMED, "python")
    cursor = buffer.rename(1, 4, "total", "sum_all")
    started = time.monotonic()
    answer = await buffer.next_edit(cursor)
    assert time.monotonic() - started < 5  # no model job: answered at once
    assert proposal_of(answer) == (3, 8, 13, "sum_all")
    assert answer["stats"]["rename"] == {"old": "total", "new": "sum_all", "remaining": 2}
    cursor = buffer.apply(answer)
    answer = await buffer.next_edit(cursor)
    assert proposal_of(answer) == (5, 11, 16, "sum_all")  # line 4: a string and a comment
    cursor = buffer.apply(answer)
    answer = await buffer.next_edit(cursor)
    assert answer["source"] == "rename" and answer["edits"] == []
    assert "left only in strings, comments or other scopes" in answer["reason"]
    after = await stats(client)
    assert after["nextEditRequests"] == before["nextEditRequests"] + 3
    assert after["nextEditRenames"] == before["nextEditRenames"] + 3
    assert after["nextEditModelCalls"] == before["nextEditModelCalls"]  # no model asked


async def test_a_rename_with_no_use_left_proposes_nothing(client):
    buffer = Buffer(
        client, "file:///r/alone.py", "def f():\n    total = 1\n    return 2\n", "python"
    )
    answer = await buffer.next_edit(buffer.rename(1, 4, "total", "one"))
    assert answer["source"] == "rename" and answer["edits"] == []
    assert "rename done" in answer["reason"]


GREET = (
    "def greet(name):\n"
    "    # naïve 🎉 greeting\n"
    "    greeting = 'hi'\n"
    '    print("🎉 café", greeting, name)\n'
)


async def rename_greeting(client) -> tuple[int, int]:
    """Rename `greeting`, apply the follow-up at its range; the proposed (start, end) columns."""
    buffer = Buffer(client, "file:///r/greet.py", GREET, "python")
    answer = await buffer.next_edit(buffer.rename(2, 4, "greeting", "hello"))
    line, start, end, new = proposal_of(answer)
    assert (line, new) == (3, "hello")
    cursor = buffer.apply(answer)  # at the client's range: it must hold `greeting` exactly
    answer = await buffer.next_edit(cursor)
    assert answer["edits"] == [] and "left only in" in answer["reason"]  # the comment's
    return start, end


async def test_utf16_columns_after_non_ascii_text(tiny_model_dir):
    vscode = await start("visual_studio_code", tiny_options(tiny_model_dir))
    try:
        # `    print("🎉 café", `: the emoji is two UTF-16 units, `é` one.
        assert await rename_greeting(vscode) == (21, 29)
    finally:
        await stop(vscode)


async def test_utf8_columns_when_the_client_chose_utf8(client):
    # Neovim offers UTF-8 positions and the server takes them: the emoji is 4 bytes, `é` 2.
    assert await rename_greeting(client) == (24, 32)


async def test_typescript_rename_is_followed_up(client):
    text = (
        "export function total(items: number[]): number {\n"
        "  let $sum = 0; // $sum so far\n"
        "  for (const item of items) {\n"
        "    $sum += item;\n"
        "  }\n"
        "  return $sum;\n"
        "}\n"
    )
    buffer = Buffer(client, "file:///r/total.ts", text, "typescript")
    cursor = buffer.rename(1, 6, "$sum", "$acc")
    answer = await buffer.next_edit(cursor)
    assert proposal_of(answer) == (3, 4, 8, "$acc")


async def test_go_rename_stays_in_its_function(client):
    text = (
        "package stats\n"
        "\n"
        "func Mean(xs []float64) float64 {\n"
        "\ttotal := 0.0\n"
        "\tfor _, x := range xs {\n"
        "\t\ttotal += x\n"
        "\t}\n"
        "\treturn total / float64(len(xs))\n"
        "}\n"
        "\n"
        "func Sum(xs []float64) (total float64) {\n"
        "\treturn total\n"
        "}\n"
    )
    buffer = Buffer(client, "file:///r/stats.go", text, "go")
    cursor = buffer.rename(3, 1, "total", "acc")
    answer = await buffer.next_edit(cursor)
    assert proposal_of(answer) == (5, 2, 7, "acc")
    answer = await buffer.next_edit(buffer.apply(answer))
    assert proposal_of(answer) == (7, 8, 13, "acc")
    answer = await buffer.next_edit(buffer.apply(answer))
    assert answer["edits"] == [] and answer["source"] == "rename"


async def test_a_disabled_language_gets_no_rename(client):
    buffer = Buffer(client, "file:///r/notes.md", "total\n\ntotal again\n", "markdown")
    answer = await buffer.next_edit(buffer.rename(0, 0, "total", "sum"))
    assert answer["edits"] == [] and "disabled" in answer["reason"]


async def test_a_rename_arrives_while_a_serving_engine_is_down(tiny_model_dir):
    # Port 9 (discard): nothing listens; the engine is never reached for a rename.
    model = {"path": str(tiny_model_dir), "backend": "llama.cpp", "url": "http://127.0.0.1:9"}
    remote = await start("neovim", {"model": model})
    try:
        buffer = Buffer(remote, "file:///r/remote.py", RENAMED, "python")
        answer = await buffer.next_edit(buffer.rename(1, 4, "total", "sum_all"))
        assert proposal_of(answer) == (3, 8, 13, "sum_all")
        buffer.change((1, 14), (1, 15), "1")  # `= 0` -> `= 1`: no rename, the engine's to answer
        answer = await buffer.next_edit((1, 15))
        assert answer["edits"] == [] and answer["source"] is None
        assert answer["reason"].startswith("engine unavailable: ")  # down: said, not hung
    finally:
        await stop(remote)


KEYS = """def load(data):
    if "name" in data:
        return data["name"]  # the name
    return None
"""


async def test_a_string_constant_changed_offers_its_other_use_with_no_model(client):
    before = await stats(client)
    buffer = Buffer(client, "file:///r/keys.py", KEYS, "python")
    cursor = buffer.rename(1, 8, "name", "key")
    started = time.monotonic()
    answer = await buffer.next_edit(cursor)
    assert time.monotonic() - started < 5  # no model job: answered at once
    assert answer["source"] == "string" and answer["window"] is None
    (proposal,) = answer["edits"]
    assert proposal["newText"] == "key"
    assert proposal["range"]["start"] == {"line": 2, "character": 21}
    assert proposal["range"]["end"] == {"line": 2, "character": 25}
    assert answer["stats"]["string"] == {"old": '"name"', "new": '"key"', "remaining": 1}
    after = await stats(client)
    assert after["nextEditStrings"] == before["nextEditStrings"] + 1
    assert after["nextEditModelCalls"] == before["nextEditModelCalls"]
