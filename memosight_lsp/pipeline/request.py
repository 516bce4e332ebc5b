"""What a completion request is and what answers it, whoever computes it: the request, the
result, the cursor's plan (refused or not, one line or a block), the packed context at the
cursor, and `CompletionBackend`, the protocol that the model in this process
(local_backend.LocalBackend) and a serving engine (engine_backend.EngineBackend) both implement.

No torch here: the server's request path imports this before any model is loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from memosight_lsp.config import KvCompression, LineStartReading, Settings
from memosight_lsp.context import PackedContext, Packing, Rerank, build_context
from memosight_lsp.workspace.files import indexable_text
from memosight_lsp.workspace.languages import language_for

from .policy import (
    CursorSituation,
    describe_cursor,
    file_refusal,
    mid_word_refusal,
    wants_multiline,
)
from .positions import split_at
from .syntax import cursor_place

if TYPE_CHECKING:
    from memosight_lsp.workspace import WorkspaceIndex

    from .prompt import Prompt


# Called on the worker with what a completion still decoding has verified (Completion.text).
PartialListener = Callable[["Completion"], None]
# A first-response deadline (time.monotonic()), or what tells it at each decoding step: a
# precompute has none until a request joins it and brings its own.
Deadline = float | Callable[[], float]


def packing_for(settings: Settings) -> Packing:
    """How the context settings share the budget (context.Packing)."""
    context = settings.context
    return Packing(
        cross_share=context.cross_file_share / 100,
        similar=context.similar_snippets,
        gate=context.cross_file_gate,
    )


@dataclass(frozen=True)
class CursorPlan:
    situation: CursorSituation
    multiline: bool  # a block is wanted here, not one line
    refused: str | None  # why not to complete here (None: go on)


# The request's defaults are the settings' defaults (config.py), so the two cannot drift.
_DEFAULTS = Settings()


@dataclass(frozen=True, kw_only=True)
class CompletionRequest:
    text: str  # the whole document
    line: int  # 0-based
    column: int  # str index into the line (not UTF-16)
    path: str | None = None
    language_id: str | None = None
    buffer_id: str | None = None  # the per-buffer state key (an LSP uri)
    max_new_tokens: int = _DEFAULTS.completion.max_new_tokens
    budget_tokens: int = _DEFAULTS.context.budget_tokens
    multiline: str = _DEFAULTS.completion.multiline
    mid_word: str = _DEFAULTS.completion.mid_word
    # The deadline of `complete(on_partial=...)` and the cold prompt's latency target (0: none).
    first_response_ms: int = _DEFAULTS.completion.first_response_ms
    # Decoding ends by then with what is verified (the prompt's prefill included).
    max_wait_ms: int = _DEFAULTS.completion.max_wait_ms
    # Items wanted: the greedy completion and up to alternatives - 1 others (1: greedy alone).
    alternatives: int = _DEFAULTS.completion.alternatives
    # How a line start is read (pipeline/readings.py).
    line_start_reading: LineStartReading = _DEFAULTS.completion.line_start_reading
    plain: bool = not _DEFAULTS.completion.speculative  # plain greedy decoding, no acceleration
    # KV compression for long prompts; inference/compression_policy.py decides where it runs.
    kv_compression: KvCompression = _DEFAULTS.compression.kv_compression
    kv_ratio: int = _DEFAULTS.compression.kv_ratio
    min_prompt_tokens: int = _DEFAULTS.compression.min_prompt_tokens
    # Cross-file context: the workspace index holding this file (None: the current file only),
    # other open buffers {path: text}, and recent edits [(path, 0-based line)], oldest first.
    index: WorkspaceIndex | None = None
    open_buffers: Mapping[str, str] = field(default_factory=dict)
    recent_edits: tuple[tuple[str, int], ...] = ()
    # How the budget is shared with an index (context.Packing), and other files' snippets in the
    # model family's repository format where its vocabulary has one (else path marker comments).
    packing: Packing = field(default_factory=lambda: packing_for(_DEFAULTS))
    repo_format: bool = False
    # The cursor's plan, made once where the request was built (the server does it before the
    # worker hop, and refuses there): a backend uses it as is. None: the backend makes it.
    plan: CursorPlan | None = None

    def stop_at(self) -> float:
        """The time.monotonic() by which decoding (or a prewarm's prefill) started now ends."""
        return time.monotonic() + self.max_wait_ms / 1000

    @classmethod
    def from_settings(cls, settings: Settings, **request: Any) -> CompletionRequest:
        """A request under these settings; `request` gives the rest (text, line, column, ...).
        from_settings(Settings(), ...) equals the defaults above (tests/test_config.py)."""
        return cls(
            max_new_tokens=settings.completion.max_new_tokens,
            budget_tokens=settings.context.budget_tokens,
            multiline=settings.completion.multiline,
            mid_word=settings.completion.mid_word,
            first_response_ms=settings.completion.first_response_ms,
            max_wait_ms=settings.completion.max_wait_ms,
            alternatives=settings.completion.alternatives,
            line_start_reading=settings.completion.line_start_reading,
            plain=not settings.completion.speculative,
            kv_compression=settings.compression.kv_compression,
            kv_ratio=settings.compression.kv_ratio,
            min_prompt_tokens=settings.compression.min_prompt_tokens,
            packing=packing_for(settings),
            **request,
        )


@dataclass(kw_only=True)
class Completion:
    text: str  # insert at the cursor
    # The text runs through the rest of the cursor's line, which it holds (postprocess.
    # through_rest: `t *testing.T) {` at `func f(|)`): it replaces that rest.
    replaces_rest: bool = False
    reason: str | None = None  # why there is no completion, when text is empty
    multiline: bool = False
    new_tokens: int = 0
    prompt_tokens: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""
    model: str = ""
    raw: str = ""  # the decoded model output before trimming
    stats: dict = field(default_factory=dict)
    # Other items beside `text`, post-processed and distinct (pipeline/alternatives.py).
    alternatives: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            **({"replaces_rest": True} if self.replaces_rest else {}),
            "reason": self.reason,
            "multiline": self.multiline,
            "new_tokens": self.new_tokens,
            "prompt_tokens": self.prompt_tokens,
            "prefill_ms": round(self.prefill_ms, 2),
            "decode_ms": round(self.decode_ms, 2),
            "total_ms": round(self.total_ms, 2),
            "stop_reason": self.stop_reason,
            "model": self.model,
            **({"alternatives": self.alternatives} if self.alternatives else {}),
            **({"stats": self.stats} if self.stats else {}),
        }


def plan_of(request: CompletionRequest) -> CursorPlan:
    """The plan a backend follows: the one the request carries, else one made now (the CLI, the
    benchmarks, direct callers)."""
    return request.plan if request.plan is not None else plan_cursor(request)


def plan_cursor(request: CompletionRequest, *, document: str | None = None) -> CursorPlan:
    """What the cursor is in and what kind of completion it wants: the same for every backend.
    `document`: the whole file when request.text is a window cut from it (the server's), so that
    a generated file is told by its own top, not by wherever the window starts."""
    line_chars = request_line_chars(request)
    refused = file_refusal(request.text if document is None else document, line_chars)
    if refused is not None:  # no parse of a file nobody types, nor of a data line
        situation = CursorSituation(line_prefix="", line_suffix="", previous_line="", indent="")
        return CursorPlan(situation=situation, multiline=False, refused=refused)
    situation = cursor_situation(request)
    return CursorPlan(
        situation=situation,
        multiline=wants_multiline(situation, request.multiline),
        refused=mid_word_refusal(situation, request.mid_word),
    )


def request_line_chars(request: CompletionRequest) -> int:
    """The length of the cursor's line, found without splitting the text into lines."""
    start = 0
    for _ in range(request.line):
        start = request.text.find("\n", start) + 1
        if start == 0:
            return 0
    end = request.text.find("\n", start)
    return (len(request.text) if end == -1 else end) - start


def cursor_situation(request: CompletionRequest) -> CursorSituation:
    """The cursor as the policies see it: its line, the block it is in, and what the syntax
    tree says (in a string, a comment or brackets)."""
    prefix, suffix = split_at(request.text, request.line, request.column)
    spec = language_for(request.path, request.language_id)
    place = (
        cursor_place(prefix, suffix, path=request.path, language_id=request.language_id)
        if spec is not None
        else None
    )
    return describe_cursor(
        prefix,
        suffix,
        in_expression=None if place is None else place != "code",
        in_brackets=place == "brackets",
        language=spec.name if spec is not None else None,
    )


def pack_context(
    request: CompletionRequest,
    budget: int,
    count_tokens: Callable[[str], int],
    rerank: Rerank | None = None,
    max_suffix_tokens: int | None = None,
) -> PackedContext:
    """The ranked workspace context at the request's cursor, packed into `budget` tokens."""
    return build_context(
        text=request.text,
        path=request.path,
        line=request.line,
        column=request.column,
        language_id=request.language_id,
        budget_tokens=budget,
        count_tokens=count_tokens,
        # A huge or binary text is not parsed for ranking: it gets its own lines only.
        index=request.index if indexable_text(request.text) else None,
        open_buffers=request.open_buffers,
        recent_edits=request.recent_edits,
        rerank=rerank,
        max_suffix_tokens=max_suffix_tokens,
        packing=request.packing,
    )


class CompletionBackend(Protocol):
    """What completes at a cursor for the server: the model in this process or a serving
    engine. One worker calls it; `complete` answers with a Completion whatever happens (an
    empty text with a reason), never raises for the request's own sake."""

    @property
    def name(self) -> str: ...

    def warm_up(self, request: CompletionRequest | None = None) -> None: ...

    def forget(self, buffer_id: str) -> None: ...

    def session_ended(self) -> None:
        """An editor's session ended and the model is kept for the next (host_process/): drop
        what was made from that session's workspace; keep what is checked when reused."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def context_budget(self, request: CompletionRequest) -> int: ...

    def latency(self, request: CompletionRequest) -> dict[str, Any]: ...

    def prewarm(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        pin: bool = True,
    ) -> dict[str, Any]: ...

    def prepare(self, request: CompletionRequest, *, stable: bool = True) -> Prompt: ...

    def complete(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        deadline: Deadline | None = None,
        on_partial: PartialListener | None = None,
    ) -> Completion: ...
