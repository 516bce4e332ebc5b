"""memosight/context: the prompt the model would see at a cursor, its snippets as LSP locations,
and why there would be no completion there (the completions' own answer, CompletionFlow.refusal).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from lsprotocol import types
from pygls.workspace import PositionCodec, TextDocument

from memosight_lsp.context import Snippet, current_name
from memosight_lsp.pipeline.prompt import Prompt
from memosight_lsp.session.completion_flow import give_up_s
from memosight_lsp.session.documents import LineIndex
from memosight_lsp.session.scheduler import JobAbandoned
from memosight_lsp.workspace import WorkspaceIndex

from .server import MemoSightServer


async def explain(
    ls: MemoSightServer,
    uri: str,
    doc: TextDocument | None,
    position: types.Position,
    budget: int | None = None,
) -> dict[str, Any]:
    """What a completion at `position` would be given ({promptTokens, snippets, prompt}) and the
    reason it would be empty (None when the model would be asked). `doc` is the open document
    `uri` names (snippets of it are located with the client's `uri`); `budget` overrides
    context.budgetTokens. The prompt comes from the very prepare() a completion runs."""
    empty: dict[str, Any] = {"promptTokens": 0, "snippets": [], "prompt": "", "reason": None}
    settings = ls.settings
    cursor = ls.flow.cursor(doc, position) if doc is not None else None
    if cursor is not None and settings.enable:
        ls.host.ensure(settings.model)
    reason = ls.flow.refusal(cursor, settings)
    if doc is None or cursor is None:
        return {**empty, "reason": reason}
    if reason is not None and ls.host.state == "error":
        return {**empty, "reason": reason}
    window, request = ls.flow.request_for(cursor.text, cursor.offset, cursor, settings)
    if budget is not None:  # exactly this budget: no latency sizing, no pinned head
        request = replace(request, budget_tokens=budget, first_response_ms=0)

    def prepare(cancelled) -> tuple[Prompt, int] | None:
        backend = ls.host.backend
        if backend is None:
            return None
        # The very prepare() a completion runs: same index, buffers, edits and budget (a budget
        # of its own packs afresh and leaves the buffer's pinned head alone).
        prompt = backend.prepare(request, stable=budget is None)
        return prompt, backend.count_tokens(prompt.text)

    job = ls.scheduler.submit(f"{uri}#context", prepare, give_up_s=give_up_s(settings))
    try:
        prepared = await asyncio.wrap_future(job.future)
    except asyncio.CancelledError:
        job.release()
        raise
    except JobAbandoned as err:
        return {**empty, "reason": str(err)}
    if prepared is None:
        return {**empty, "reason": reason or f"model not ready: {ls.host.message}"}
    prompt, prompt_tokens = prepared
    lines = ls.flow.line_index(doc)
    if lines.text is not cursor.text:  # edited while the context was built
        lines = LineIndex.of(cursor.text)
    mapper = SnippetRanges(
        lines=lines,
        codec=doc.position_codec,
        uri=uri,
        cursor=cursor.position,
        first_line=cursor.text.count("\n", 0, window.start),
        index=request.index,
        current=current_name(request.index, request.path),
    )
    return {
        "promptTokens": prompt_tokens,
        "snippets": [mapper.snippet(s) for s in prompt.context.snippets],
        "prompt": prompt.text,
        "reason": reason,
        # The sizes it was packed with (pipeline/latency.py) and whether it was built on the
        # buffer's pinned head (pipeline/stable_prompt.py).
        "budget": {
            **(prompt.budget.describe() if prompt.budget else {}),
            "stableHead": prompt.stable_head,
        },
    }


@dataclass(frozen=True, kw_only=True)
class SnippetRanges:
    """Context snippets (0-based lines of the window or of another file) as LSP locations."""

    lines: LineIndex
    codec: PositionCodec
    uri: str
    cursor: types.Position
    first_line: int  # document line of the window's first line
    index: WorkspaceIndex | None
    current: str  # how the context names the current file (context.current_name)

    def snippet(self, s: Snippet) -> dict[str, Any]:
        if s.path == self.current or self.index is None:
            uri = self.uri
            start = self.line_start(s.start_line) if s.kind != "suffix" else self.cursor
            end = self.line_end(s.end_line) if s.kind != "prefix" else self.cursor
        else:
            uri = self.index.abspath(s.path).as_uri()
            start = types.Position(line=s.start_line, character=0)
            end = types.Position(line=s.end_line + 1, character=0)
        return {
            "uri": uri,
            "range": {"start": as_json(start), "end": as_json(end)},
            "symbol": s.symbol,
            "kind": s.kind,
            "tokens": s.tokens,
        }

    def line_start(self, line: int) -> types.Position:
        row = min(self.first_line + line, len(self.lines.starts) - 1)
        return types.Position(line=row, character=0)

    def line_end(self, line: int) -> types.Position:
        row = min(self.first_line + line, len(self.lines.starts) - 1)
        offset = self.lines.starts[row] + len(self.lines.content(row))
        return self.lines.position_at(self.codec, offset)


def as_json(position: types.Position) -> dict[str, int]:
    return {"line": position.line, "character": position.character}
