"""Cross-file context through the real server: a workspace index per folder, scanned with
$/progress, fed by didChange, and `memosight/context` answering from the completion's prepare()."""

from __future__ import annotations

import asyncio
import hashlib

import msgpack
import pytest
import pytest_asyncio
from lsp_session import context, edit, open_doc, start, stats, stop, tiny_options, wait_until
from lsprotocol import types

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.slow]

A_PY = '''"""Prices."""


def compute_total(prices, tax_rate):
    """Sum the prices and add tax."""
    return sum(prices) * (1 + tax_rate)
'''

B_PY = """from a import apply_discount, compute_total


def checkout(cart):
    total = compute_total(cart.prices, 0.2)
    return apply_discount(
"""
CALL_SITE = (4, 26)  # inside compute_total(
DISCOUNT_SITE = (5, 26)  # after apply_discount(

NEW_FUNCTION = '''

def apply_discount(total, percent):
    """Take percent off the total."""
    return total * (1 - percent / 100)
'''


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws").resolve()
    (root / "a.py").write_text(A_PY)
    (root / "b.py").write_text(B_PY)
    cache_home = tmp_path_factory.mktemp("cache")
    # A corrupt cache for this root: the server must discard it, index anyway and rewrite it.
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    cache_file = cache_home / "memosight" / digest / "index.msgpack"
    cache_file.parent.mkdir(parents=True)
    cache_file.write_bytes(b"\x93not msgpack at all\xff")
    return root, cache_home, cache_file


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(workspace, tiny_model_dir):
    root, cache_home, _ = workspace
    client = await start(
        "neovim", tiny_options(tiny_model_dir), root=root, env={"XDG_CACHE_HOME": str(cache_home)}
    )
    await wait_until(lambda: index_progress(client, "end"), timeout=60)
    yield client
    await stop(client)


def index_progress(client, kind: str) -> list:
    return [
        report
        for token, reports in client.progress_reports.items()
        if str(token).startswith("memosight-index")
        for report in reports
        if report.kind == kind
    ]


def snippet_from(result: dict, uri: str, symbol: str, line: int | None = None) -> dict | None:
    """The snippet of `uri` that shows `symbol`: its own chunk or, when its `line` is given, a
    window of similar code over that line (context.similarSnippets)."""
    for s in result["snippets"]:
        if s["uri"] != uri:
            continue
        if s["symbol"] == symbol:
            return s
        start, end = s["range"]["start"], s["range"]["end"]
        # The range's end is exclusive: a window of lines 0-5 ends at line 6, character 0.
        covers = line is not None and start["line"] <= line < end["line"] + (end["character"] > 0)
        if s["kind"] == "window" and covers:
            return s
    return None


async def test_indexing_reports_progress_and_rewrites_a_corrupt_cache(client, workspace):
    begin, end = index_progress(client, "begin"), index_progress(client, "end")
    assert len(begin) == 1 and len(end) == 1
    assert "indexed 2 files" in end[0].message
    reports = index_progress(client, "report")
    percentages = [report.percentage for report in reports]
    assert percentages and percentages == sorted(percentages) and percentages[-1] == 100
    numbers = await stats(client)
    assert numbers["indexes"] == [{"root": str(workspace[0]), "files": 2}]
    cached = msgpack.unpackb(workspace[2].read_bytes(), raw=False)
    assert set(cached["files"]) == {"a.py", "b.py"}


async def test_context_at_a_call_site_holds_the_definition_from_the_other_file(client, workspace):
    root = workspace[0]
    b_uri, a_uri = (root / "b.py").as_uri(), (root / "a.py").as_uri()
    open_doc(client, b_uri, B_PY)
    result = await context(client, b_uri, *CALL_SITE)
    assert result["reason"] is None
    snippet = snippet_from(result, a_uri, "compute_total")
    assert snippet is not None, result["snippets"]
    assert snippet["kind"] in ("full", "signature") and snippet["tokens"] > 0
    assert snippet["range"]["start"] == {"line": 3, "character": 0}
    assert "# file: a.py\n" in result["prompt"]
    assert "def compute_total(prices, tax_rate):" in result["prompt"]
    assert result["prompt"].index("# file: a.py") < result["prompt"].index("# file: b.py")
    kinds = [s["kind"] for s in result["snippets"]]
    assert "prefix" in kinds and "suffix" in kinds
    prefix = next(s for s in result["snippets"] if s["kind"] == "prefix")
    assert prefix["uri"] == b_uri and prefix["range"]["end"] == {"line": 4, "character": 26}


async def test_an_unsaved_edit_in_another_buffer_reaches_the_context(client, workspace):
    root = workspace[0]
    b_uri, a_uri = (root / "b.py").as_uri(), (root / "a.py").as_uri()
    before = await context(client, b_uri, *DISCOUNT_SITE)
    assert snippet_from(before, a_uri, "apply_discount") is None
    assert "def apply_discount" not in before["prompt"]
    open_doc(client, a_uri, A_PY)
    end_line = A_PY.count("\n")
    edit(client, a_uri, 2, (end_line, 0), (end_line, 0), NEW_FUNCTION.lstrip("\n"))
    found: dict = {}

    new_line = end_line + 1  # the new function's second line: the old text has no such line

    async def probe() -> bool:
        found.update(await context(client, b_uri, *DISCOUNT_SITE))
        return snippet_from(found, a_uri, "apply_discount", new_line) is not None

    for _ in range(50):
        if await probe():
            break
        await asyncio.sleep(0.1)
    snippet = snippet_from(found, a_uri, "apply_discount", new_line)
    assert snippet is not None, found["snippets"]
    assert snippet["range"]["start"]["line"] <= end_line <= snippet["range"]["end"]["line"]
    # The same answer's prompt holds it: a head pinned before the index had the edit is not
    # kept (LocalBackend.prepare's key).
    assert "def apply_discount(total, percent):" in found["prompt"], found["prompt"]
    assert "apply_discount" not in (root / "a.py").read_text()  # never saved


async def test_budget_and_cross_file_setting_are_honoured(client, workspace):
    root = workspace[0]
    b_uri, a_uri = (root / "b.py").as_uri(), (root / "a.py").as_uri()
    small = await client.protocol.send_request_async(
        "memosight/context",
        {"textDocument": {"uri": b_uri}, "position": {"line": 4, "character": 26}, "budget": 24},
    )
    assert 0 < small.promptTokens <= 24 + 8  # budget + FIM markers
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"memosight": {"context": {"crossFile": False}}}
        )
    )
    try:
        result: dict = {}
        for _ in range(40):
            result = await context(client, b_uri, *CALL_SITE)
            if all(s["uri"] == b_uri for s in result["snippets"]):
                break
            await asyncio.sleep(0.05)
        assert all(s["uri"] == b_uri for s in result["snippets"]), result["snippets"]
        assert "# file: a.py" not in result["prompt"]
    finally:
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(
                settings={"memosight": {"context": {"crossFile": True}}}
            )
        )
    again = await context(client, b_uri, *CALL_SITE)
    assert snippet_from(again, a_uri, "compute_total", 3) is not None


async def test_a_file_outside_the_workspace_gets_its_own_text_only(client):
    uri = "file:///elsewhere/outside.py"
    open_doc(client, uri, "from a import compute_total\n\ncompute_total(")
    result = await context(client, uri, 2, 14)
    assert {s["uri"] for s in result["snippets"]} == {uri}
    assert {s["kind"] for s in result["snippets"]} <= {"prefix", "suffix", "enclosing"}


async def test_an_added_workspace_folder_is_indexed(client, tmp_path_factory):
    root = tmp_path_factory.mktemp("ws2").resolve()
    (root / "helpers.py").write_text("def format_money(value):\n    return f'{value:.2f}'\n")
    main_text = "from helpers import format_money\n\nprint(format_money(\n"
    (root / "main.py").write_text(main_text)
    uri, helpers = (root / "main.py").as_uri(), (root / "helpers.py").as_uri()
    open_doc(client, uri, main_text)
    before = await context(client, uri, 2, 19)
    assert {s["uri"] for s in before["snippets"]} == {uri}  # outside every folder yet
    client.workspace_did_change_workspace_folders(
        types.DidChangeWorkspaceFoldersParams(
            event=types.WorkspaceFoldersChangeEvent(
                added=[types.WorkspaceFolder(uri=root.as_uri(), name="ws2")], removed=[]
            )
        )
    )
    result: dict = {}
    for _ in range(100):
        result = await context(client, uri, 2, 19)
        if snippet_from(result, helpers, "format_money", 0):
            break
        await asyncio.sleep(0.1)
    assert snippet_from(result, helpers, "format_money", 0), result["snippets"]
    assert "# file: helpers.py\n" in result["prompt"]
