"""What a serving engine does for a completion, and nothing more: the Engine protocol.

Everything above the engine stays in the language server: context ranking and packing, the
FIM prompt in the model's format, post-processing, type-through, precompute, newest-wins
cancellation and the stats. A backend only

- `probe(deadline)`: asks the engine what it serves (model, context length, tokenizer, FIM
  tokens, whether it lays out an infill prompt itself) -> EngineInfo;
- `generate(request, on_text, cancelled)`: streams one completion of a prompt, handing the text
  so far to `on_text` (True: enough, stop reading) and closing the connection as soon as
  `cancelled()` turns true -> EngineResult, with the engine's own count of prompt tokens it
  took from its prefix cache and those it computed.

Backends are plain HTTP clients (engines/http.py): no torch, no LSP. A failure is an
http.EngineError; a cancelled request raises http.Cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from memosight_lsp.inference.fim import FimFormat, resolve_fim_format

from . import http

# Characters per token assumed where the engine has no tokenizer endpoint (Ollama, most
# OpenAI-compatible servers): what the rest of the project assumes without a tokenizer.
DEFAULT_CHARS_PER_TOKEN = 4.0

# A fixed sample of code the engine's tokenizer is measured on once, at probe time: context
# packing then counts tokens locally (chars / ratio) with no round trip per line, and the count
# stays the same from keystroke to keystroke (a changing estimate would move the prompt's
# layout and spoil the engine's prefix cache).
CALIBRATION_TEXT = '''import os
from dataclasses import dataclass, field


@dataclass
class Entry:
    """One row of the index: a name, where it is defined and how often it is used."""

    name: str
    path: str
    line: int = 0
    uses: list[int] = field(default_factory=list)

    def describe(self) -> str:
        return f"{self.name} ({os.path.basename(self.path)}:{self.line + 1}, {len(self.uses)} uses)"


def load(rows: list[dict[str, object]]) -> dict[str, Entry]:
    index: dict[str, Entry] = {}
    for row in rows:
        name = str(row["name"])
        entry = index.setdefault(name, Entry(name=name, path=str(row["path"])))
        entry.uses.append(int(row.get("line", 0)))  # type: ignore[arg-type]
    return {name: index[name] for name in sorted(index)}
'''


@dataclass(frozen=True, kw_only=True)
class EngineInfo:
    engine: str  # "vllm", "llama.cpp", "ollama", "openai"
    url: str
    model: str  # the model as the engine names it (what requests ask for)
    fim: FimFormat | None  # the FIM format the prompt is written in; None: the prefix only
    infill: bool = False  # the engine lays the FIM prompt out itself from prefix/suffix/extra
    context_length: int | None = None  # tokens per sequence the engine allows
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN
    token_ids: bool = False  # prompts are sent as token ids from the engine's own tokenizer
    notes: tuple[str, ...] = ()  # what was detected and what fell back, for the log

    def describe(self) -> str:
        fim = (
            "engine-side infill"
            if self.infill
            else (f"FIM {self.fim.name}" if self.fim else "prefix only (no FIM tokens)")
        )
        ids = ", token ids" if self.token_ids else ""
        ctx = f", {self.context_length} context" if self.context_length else ""
        return f"{self.engine} at {self.url}: {self.model} ({fim}{ids}{ctx})"


@dataclass(frozen=True, kw_only=True)
class PromptPieces:
    """One prompt, whole and in pieces: engines that take text or token ids get `text` (the
    FIM prompt we built); engines that lay out an infill prompt themselves get the pieces."""

    text: str  # the whole prompt in the model's FIM format (or the prefix alone)
    prefix: str  # the current file's part of the prefix (its path marker, heads, the lines)
    suffix: str  # the code after the cursor
    extra: tuple[tuple[str, str], ...] = ()  # (path, text) of other files' snippets, in order


@dataclass(frozen=True, kw_only=True)
class GenerateRequest:
    prompt: PromptPieces
    max_tokens: int
    deadline: float  # time.monotonic() by which the answer must be complete
    stop: tuple[str, ...] = ()  # strings that end the completion (the engine stops on them)
    # The prompt's text as it is, to the engine's raw completion endpoint (llama.cpp
    # /completion, /v1/completions, Ollama raw): no engine-side infill or template and no FIM
    # stops, only `stop` (next edits: next_edit/remote.py).
    raw: bool = False


@dataclass(kw_only=True)
class EngineResult:
    text: str  # what the engine generated (up to where we stopped reading)
    # "stop" (the model ended), "length" (max_tokens), "enough" (on_text said so: the stream
    # was closed), "deadline" (the deadline passed mid-stream: the text so far)
    finish: str
    completion_tokens: int | None = None
    prompt_tokens: int | None = None  # the prompt's length in tokens, where known
    cached_tokens: int | None = None  # prompt tokens the engine reused from its prefix cache
    prefilled_tokens: int | None = None  # prompt tokens the engine computed for this request
    first_token_ms: float | None = None
    total_ms: float = 0.0
    extra: dict = field(default_factory=dict)  # engine-specific timings, for the stats

    def stats(self) -> dict:
        """The engine's numbers for Completion.stats (None where the engine does not say)."""
        return {
            "finish": self.finish,
            "promptTokens": self.prompt_tokens,
            "cachedTokens": self.cached_tokens,
            "prefilledTokens": self.prefilled_tokens,
            "completionTokens": self.completion_tokens,
            "firstTokenMs": None if self.first_token_ms is None else round(self.first_token_ms, 2),
            "totalMs": round(self.total_ms, 2),
            **self.extra,
        }


OnText = Callable[[str], bool]  # the text generated so far -> True to stop reading


class TextStream:
    """The text of one streamed completion as it arrives: when the first piece came, and
    whether `on_text` has seen enough."""

    def __init__(self, on_text: OnText) -> None:
        self.on_text = on_text
        self.started = time.perf_counter()
        self.text = ""
        self.first_token_ms: float | None = None
        self.enough = False

    def add(self, piece: str) -> bool:
        """Append a piece; True when on_text says the completion is complete."""
        if piece:
            if self.first_token_ms is None:
                self.first_token_ms = self.elapsed_ms()
            self.text += piece
            self.enough = self.on_text(self.text)
        return self.enough

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def result(self, finish: str, **counts: Any) -> EngineResult:
        return EngineResult(
            text=self.text,
            finish="enough" if self.enough else finish,
            first_token_ms=self.first_token_ms,
            total_ms=self.elapsed_ms(),
            **counts,
        )


class StreamReader:
    """How one engine's stream says what it generated: `events` parses its lines, `pieces(event)`
    yields the text an event carries and then notes the end it announces (`finish`); `counts()`
    is the engine's token counts as far as the stream told them. Reading stops at the finish
    unless `read_to_end` (the counts come after it)."""

    finish: str | None = None
    read_to_end = False

    def events(self, lines: Iterator[str], url: str) -> Iterator[dict[str, Any]]:
        return http.sse_json(lines, url)

    def pieces(self, event: dict[str, Any]) -> Iterator[str]:
        raise NotImplementedError

    def counts(self) -> dict[str, Any]:
        return {}


class Engine(Protocol):
    engine: str
    url: str

    def probe(self, deadline: float) -> EngineInfo: ...

    def has_token(self, token: str, deadline: float) -> bool: ...

    def generate(
        self,
        request: GenerateRequest,
        *,
        on_text: OnText,
        cancelled: Callable[[], bool],
    ) -> EngineResult: ...


def fim_from_vocabulary(
    has_token: Callable[[str], bool], override: str | None
) -> tuple[FimFormat | None, str]:
    """The FIM format of the engine's model: the override, else the first known format whose
    markers are single tokens of its vocabulary (`has_token`); and a note saying which."""

    class Vocabulary:
        def __contains__(self, token: object) -> bool:
            return isinstance(token, str) and has_token(token)

    fim = resolve_fim_format(Vocabulary(), override)
    if fim is not None:
        source = "set by model.fimFormat" if override not in (None, "auto") else "detected"
        return fim, f"FIM format {fim.name} ({source})"
    if override == "none":
        return None, "FIM off (model.fimFormat none): prefix-only prompts"
    return None, "the model has no FIM tokens: prefix-only prompts"


def bearer(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class EngineClient:
    """What every HTTP backend keeps from its settings: the engine's root URL (`root` turns what
    the user wrote into it), the model name, the auth header and the FIM override; `info` is
    what the probe found (None until then)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        fim_override: str = "auto",
    ) -> None:
        self.url = self.root(url)
        self.model = model
        self.headers = bearer(api_key)
        self.fim_override = fim_override
        self.info: EngineInfo | None = None

    @staticmethod
    def root(url: str) -> str:
        return url.rstrip("/")

    def probe(self, deadline: float) -> EngineInfo:
        raise NotImplementedError

    def has_token(self, token: str, deadline: float) -> bool:
        """Whether `token` is one token of the served model's vocabulary (False where the
        engine cannot say: no tokenizer endpoint)."""
        return False

    def streamed(self, request: GenerateRequest) -> tuple[str, dict[str, Any], StreamReader]:
        """What one streamed completion sends (the path, the body) and how its stream reads."""
        raise NotImplementedError

    def generate(
        self,
        request: GenerateRequest,
        *,
        on_text: OnText,
        cancelled: Callable[[], bool],
    ) -> EngineResult:
        """Stream one completion: the text goes to `on_text` as it comes. It ends when on_text
        has enough, when the engine says so, or at the deadline with the text so far (with none,
        the timeout is the error); a stream that ends before the engine said the completion
        did is an error ('cut')."""
        if self.info is None:
            self.probe(request.deadline)
        stream = TextStream(on_text)
        path, body, reader = self.streamed(request)
        url = self.url + path
        try:
            with http.request(
                "POST",
                url,
                watch=http.Watch(request.deadline, cancelled),
                body=body,
                headers=self.headers,
            ) as response:
                for event in reader.events(http.lines(response, url), url):
                    for piece in reader.pieces(event):
                        if stream.add(piece):
                            return stream.result("enough", **reader.counts())
                    if reader.finish is not None and not reader.read_to_end:
                        return stream.result(reader.finish, **reader.counts())
        except http.EngineError as err:
            if err.kind == "timeout" and stream.text:
                return stream.result("deadline", **reader.counts())
            raise
        if reader.finish is None:
            raise http.EngineError(f"{url}: the stream ended before the completion did", "cut")
        return stream.result(reader.finish, **reader.counts())
