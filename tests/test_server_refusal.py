"""One answer to "why no completion here?" (CompletionFlow.refusal): a completion's reason and
memosight/context's are the same for every reason, in one order. In process, on the real server
object, since an inline completion's reply carries no reason."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.workspace import TextDocument

from memosight_lsp.config import parse_settings
from memosight_lsp.server.explain import explain
from memosight_lsp.server.server import MemoSightServer

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

URI = "file:///r/why.py"
DOC = "def add(a, b):\n    value = a + b\n    \n"
AT_LINE_START = types.Position(line=2, character=4)
MID_WORD = types.Position(line=1, character=7)  # val|ue


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ls(tiny_model_dir):
    server = initialized(MemoSightServer())
    use(server, model={"path": str(tiny_model_dir)})
    server.host.ensure(server.settings.model)
    server.host.wait(120)
    assert server.host.state == "ready", server.host.message
    yield server
    server.stop_worker()


def initialized(server: MemoSightServer) -> MemoSightServer:
    """What a client's initialize does to the server object (no handlers are registered here)."""
    params = types.InitializeParams(capabilities=types.ClientCapabilities())
    with contextlib.suppress(StopIteration):
        next(server.protocol.lsp_initialize(params))
    return server


def use(server: MemoSightServer, **raw) -> None:
    """These settings (camelCase, as a client sends them); the model stays the one loaded."""
    model = {"path": server.settings.model.path} if server.settings.model.path else {}
    settings, problems = parse_settings({"model": model, **raw})
    assert problems == []
    server.settings = settings
    server.flow.settings_changed()


def document(text: str = DOC, language: str = "python") -> TextDocument:
    return TextDocument(URI, text, version=1, language_id=language)


async def both(server: MemoSightServer, doc: TextDocument | None, at: types.Position):
    """(the completion's reason, memosight/context's reason) at one cursor."""
    completion = await server.flow.complete(doc, at)
    context = await explain(server, URI, doc, at)
    return completion.reason, context["reason"]


async def test_an_unknown_document(ls):
    use(ls)
    assert (
        await both(ls, None, AT_LINE_START)
        == ("unknown document: it was never opened with didOpen",) * 2
    )


async def test_completions_disabled_everywhere_and_for_a_language(ls):
    use(ls, enable=False)
    assert (
        await both(ls, document(), AT_LINE_START)
        == ("completions are disabled (memosight.enable is false)",) * 2
    )
    use(ls, languages={"python": False})
    assert (
        await both(ls, document(), AT_LINE_START)
        == ("completions are disabled for language 'python'",) * 2
    )
    go = document(language="go")
    assert ls.flow.refusal(ls.flow.cursor(go, AT_LINE_START), ls.settings) is None
    assert (await explain(ls, URI, go, AT_LINE_START))["reason"] is None


async def test_binary_text(ls):
    use(ls)
    binary = document("\x00\x01\x02garbage\x00\n" * 10)
    assert (
        await both(ls, binary, types.Position(line=0, character=5))
        == ("the file looks binary (NUL bytes)",) * 2
    )


async def test_inside_a_word_only_under_mid_word_skip(ls):
    use(ls, completion={"midWord": "skip", "maxNewTokens": 4})
    assert (
        await both(ls, document(), MID_WORD)
        == ("the cursor is inside a word (midWord is 'skip')",) * 2
    )
    use(ls, completion={"midWord": "complete", "maxNewTokens": 4})
    assert ls.flow.refusal(ls.flow.cursor(document(), MID_WORD), ls.settings) is None
    assert (await explain(ls, URI, document(), MID_WORD))["reason"] is None


async def test_where_the_model_is_asked_there_is_no_reason_and_a_prompt(ls):
    use(ls, completion={"maxNewTokens": 4})
    doc = document()
    assert ls.flow.refusal(ls.flow.cursor(doc, AT_LINE_START), ls.settings) is None
    context = await explain(ls, URI, doc, AT_LINE_START)
    assert context["reason"] is None and "def add(a, b):" in context["prompt"]
    completion = await ls.flow.complete(doc, AT_LINE_START)
    assert completion.source in ("model", "typeThrough", "precompute")


async def test_the_first_reason_wins_in_one_order(ls):
    binary_python = document("value = 1\x00\n")
    use(ls, enable=False, completion={"midWord": "skip"})
    assert (
        await both(ls, binary_python, types.Position(line=0, character=2))
        == ("completions are disabled (memosight.enable is false)",) * 2
    )
    use(ls, completion={"midWord": "skip"})
    reasons = await both(ls, binary_python, types.Position(line=0, character=2))
    assert reasons == ("the file looks binary (NUL bytes)",) * 2  # binary before mid-word


async def test_a_model_that_failed_to_load(tmp_path: Path):
    server = initialized(MemoSightServer())
    try:
        use(server, model={"path": str(tmp_path / "no-such-model")})
        server.host.ensure(server.settings.model)
        server.host.wait(60)
        reasons = await both(server, document("\x00binary too\n"), AT_LINE_START)
        assert reasons[0] == reasons[1]
        assert reasons[0].startswith("model error: ") and "not found" in reasons[0]
        assert (await server.flow.complete(document(), AT_LINE_START)).reason == reasons[0]
    finally:
        server.stop_worker()
