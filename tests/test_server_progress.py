"""$/progress (server/progress.py): one chain per piece of work, begin, reports, end, in order
under its own token; a refused token or a failed message ends that chain quietly. First against a
recording client, then through the real server (the model load and a folder's scan)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from lsp_session import start, stop, tiny_options, wait_for_state, wait_until
from lsprotocol import types

from memosight_lsp.server.progress import ProgressChains

WITH_PROGRESS = types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True)
)


class RecordingClient:
    """pygls's work_done_progress as seen from a client: tokens it accepted, messages it got."""

    def __init__(self, *, refuse: bool = False, fail: str | None = None, delay: float = 0.02):
        self.refuse, self.fail, self.delay = refuse, fail, delay
        self.tokens: dict[str, object] = {}
        self.created: list[str] = []
        self.got: list[tuple[str, str, str | None]] = []  # (token, kind, message)

    async def create_async(self, token: str) -> None:
        self.created.append(token)
        await asyncio.sleep(self.delay)  # slower than the messages that follow the begin
        if self.refuse:
            raise RuntimeError("the client refused the token")
        self.tokens[token] = None

    def begin(self, token: str, value) -> None:
        self._got(token, value)

    def report(self, token: str, value) -> None:
        self._got(token, value)

    def end(self, token: str, value) -> None:
        self._got(token, value)

    def _got(self, token: str, value) -> None:
        if token not in self.tokens:
            raise AssertionError(f"{value.kind} before its token {token} was created")
        if value.kind == self.fail:
            raise RuntimeError("the transport is gone")
        self.got.append((token, value.kind, value.message))


def chains_for(client: RecordingClient, capabilities=WITH_PROGRESS) -> ProgressChains:
    server = SimpleNamespace(client_capabilities=capabilities, work_done_progress=client)
    return ProgressChains(server)  # type: ignore[arg-type]


def scan(chains: ProgressChains, work: str, reports: int = 3) -> None:
    chains.begin(work, "index", types.WorkDoneProgressBegin(title="t", message=f"{work} begin"))
    for i in range(reports):
        chains.report(work, types.WorkDoneProgressReport(message=f"{work} {i}", percentage=i))
    chains.end(work, types.WorkDoneProgressEnd(message=f"{work} end"))


async def settle() -> None:
    await asyncio.sleep(0.2)


async def test_messages_keep_their_order_while_the_token_is_created():
    client = RecordingClient()
    chains = chains_for(client)
    scan(chains, "a")
    scan(chains, "b", reports=1)
    await settle()
    a, b = client.created
    assert a.startswith("memosight-index-") and a != b
    assert [m for t, _, m in client.got if t == a] == ["a begin", "a 0", "a 1", "a 2", "a end"]
    assert [m for t, _, m in client.got if t == b] == ["b begin", "b 0", "b end"]


async def test_a_refused_token_ends_that_chain_quietly():
    client = RecordingClient(refuse=True)
    chains = chains_for(client)
    scan(chains, "a")
    await settle()
    assert client.created and client.got == []
    chains.report("a", types.WorkDoneProgressReport(message="late"))  # after its end: nothing
    await settle()
    assert client.got == []


async def test_a_failed_message_ends_that_chain_and_not_the_others():
    client = RecordingClient(fail="report")
    chains = chains_for(client)
    scan(chains, "a")
    await settle()
    assert [m for _, _, m in client.got] == ["a begin"]  # the report failed: no end either
    client.fail = None
    scan(chains, "b", reports=1)
    await settle()
    assert [m for _, _, m in client.got] == ["a begin", "b begin", "b 0", "b end"]


async def test_a_client_without_work_done_progress_gets_nothing():
    client = RecordingClient()
    scan(chains_for(client, types.ClientCapabilities()), "a")
    scan(chains_for(client, None), "b")
    await settle()
    assert client.created == [] and client.got == []


async def test_a_new_begin_ends_the_chain_its_work_left_open():
    client = RecordingClient()
    chains = chains_for(client)
    chains.begin("model", "load", types.WorkDoneProgressBegin(title="t", message="first"))
    chains.begin("model", "load", types.WorkDoneProgressBegin(title="t", message="second"))
    chains.end("model", types.WorkDoneProgressEnd(message="ready"))
    await settle()
    first, second = client.created
    assert [(k, m) for t, k, m in client.got if t == first] == [("begin", "first"), ("end", None)]
    assert [(k, m) for t, k, m in client.got if t == second] == [
        ("begin", "second"),
        ("end", "ready"),
    ]


@pytest.mark.slow
async def test_the_real_server_reports_the_model_load_and_the_scan(tiny_model_dir, tmp_path):
    (tmp_path / "a.py").write_text("def one():\n    return 1\n")
    client = await start("neovim", tiny_options(tiny_model_dir), root=tmp_path)
    try:
        await wait_for_state(client, "ready")

        def chains() -> dict[str, list]:
            reports = client.progress_reports.items()
            return {str(t): v for t, v in reports if str(t).startswith("memosight-")}

        def all_ended() -> bool:
            got = chains()
            kinds = {t.split("-")[1] for t in got}
            return kinds == {"load", "index"} and all(
                v and isinstance(v[-1], types.WorkDoneProgressEnd) for v in got.values()
            )

        await wait_until(all_ended)
        for token, values in chains().items():
            assert isinstance(values[0], types.WorkDoneProgressBegin), token
            assert [type(v) for v in values[1:-1]] == [types.WorkDoneProgressReport] * (
                len(values) - 2
            ), token
    finally:
        await stop(client)
