"""$/progress for work the server reports (a folder's scan, the model load): one chain of
messages per piece of work, begin, reports, end, under a token of its own.

Called on the event loop. Each message of a chain waits for the one before: sent as they come,
a report could pass an earlier one (or the end) while the token is still being created. A
client without window.workDoneProgress gets nothing; a refused token or a failed message ends
that chain quietly (the work goes on, its progress is not shown).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.progress import Progress

log = logging.getLogger(__name__)

# One message of a chain, sent once the token exists: (pygls's progress, token) -> None.
Send = Callable[[Progress, str], None]


class ProgressChains:
    def __init__(self, server: LanguageServer) -> None:
        self._server = server
        # work -> its chain's last message being sent (its result: the token, None once ended)
        self._last: dict[Hashable, asyncio.Future[str | None]] = {}
        self._sending: set[asyncio.Future[str | None]] = set()  # held until done

    def begin(self, work: Hashable, kind: str, value: types.WorkDoneProgressBegin) -> None:
        """Start `work`'s chain under a new token `memosight-{kind}-…`. A chain of the same work
        still open is ended first (a client would otherwise show it forever)."""
        if not self._supported():
            return
        if work in self._last:
            self.end(work, types.WorkDoneProgressEnd())
        token = f"memosight-{kind}-{uuid.uuid4().hex[:8]}"
        progress = self._server.work_done_progress

        async def create() -> str | None:
            try:
                await progress.create_async(token)
            except Exception:
                log.debug("client refused the progress token %s", token, exc_info=True)
                return None
            return _sent(progress, token, lambda p, t: p.begin(t, value))

        self._last[work] = self._start(create())

    def is_open(self, work: Hashable) -> bool:
        return work in self._last

    def report(self, work: Hashable, value: types.WorkDoneProgressReport) -> None:
        self._then(work, lambda p, t: p.report(t, value), last=False)

    def end(self, work: Hashable, value: types.WorkDoneProgressEnd) -> None:
        self._then(work, lambda p, t: p.end(t, value), last=True)

    def _supported(self) -> bool:
        caps = self._server.client_capabilities
        window = caps.window if caps is not None else None
        return bool(window and window.work_done_progress)

    def _then(self, work: Hashable, send: Send, *, last: bool) -> None:
        previous = self._last.pop(work, None) if last else self._last.get(work)
        if previous is None:
            return  # no chain: no client support, or it never began
        progress = self._server.work_done_progress

        async def after() -> str | None:
            token = await previous
            if token is None or token not in progress.tokens:
                return None
            return _sent(progress, token, send)

        sending = self._start(after())
        if not last:
            self._last[work] = sending

    def _start(self, message: Coroutine[Any, Any, str | None]) -> asyncio.Future[str | None]:
        sending = asyncio.ensure_future(message)
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)
        return sending


def _sent(progress: Progress, token: str, send: Send) -> str | None:
    """Send one message; the token to go on with, None when it failed (the chain ends)."""
    try:
        send(progress, token)
    except Exception:
        log.debug("progress message for %s failed", token, exc_info=True)
        return None
    return token
