"""Ollama: `/api/generate`, streamed as newline-delimited JSON.

Written against Ollama's documented API (docs/api.md: /api/show, /api/generate); no Ollama
runs on the project's machines, so the tests drive it against a small stand-in server.

`/api/show` (verbose) gives the model's vocabulary (`model_info["tokenizer.ggml.tokens"]`),
its context length (`<arch>.context_length`) and its capabilities. With FIM tokens in the
vocabulary the prompt is ours, sent `raw` (no template); else, when the model's template
handles a suffix (capability `insert`), prefix and suffix go as `prompt` / `suffix` and
Ollama's template lays them out; else the prefix alone, raw. Ollama keeps the KV cache of
the last prompt per loaded model and reuses its common prefix; `prompt_eval_count` is what it
computed for the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from memosight_lsp.inference.fim import FORMATS_BY_NAME

from . import http
from .base import (
    DEFAULT_CHARS_PER_TOKEN,
    EngineClient,
    EngineInfo,
    GenerateRequest,
    StreamReader,
    fim_from_vocabulary,
)
from .openai import _int

KEEP_ALIVE = "30m"  # keep the model (and its KV cache) loaded between keystrokes


class OllamaClient(EngineClient):
    engine = "ollama"
    vocabulary: frozenset[str] = frozenset()  # the model's tokens, from /api/show at probe time

    def has_token(self, token: str, deadline: float) -> bool:
        return token in self.vocabulary

    def _model_name(self, deadline: float) -> str:
        if self.model:
            return self.model
        tags = http.get_json(
            self.url + "/api/tags", watch=http.Watch(deadline), headers=self.headers
        )
        models = tags.get("models") if isinstance(tags, dict) else None
        names: list[str] = [
            m["name"]
            for m in models or []
            if isinstance(m, dict) and isinstance(m.get("name"), str)
        ]
        if not names:
            raise http.EngineError(
                f"ollama at {self.url} has no model pulled; `ollama pull` one and set model.name",
                "status",
                404,
            )
        return names[0]

    def probe(self, deadline: float) -> EngineInfo:
        name = self._model_name(deadline)
        show = http.post_json(
            self.url + "/api/show",
            {"model": name, "verbose": True},
            watch=http.Watch(deadline),
            headers=self.headers,
        )
        if not isinstance(show, dict):
            raise http.EngineError(f"{self.url}/api/show: not a JSON object", "malformed")
        info: dict[str, Any] = (
            show["model_info"] if isinstance(show.get("model_info"), dict) else {}
        )
        capabilities = show.get("capabilities") or []
        vocabulary = info.get("tokenizer.ggml.tokens")
        if isinstance(vocabulary, list):
            self.vocabulary = frozenset(t for t in vocabulary if isinstance(t, str))
        arch = info.get("general.architecture")
        context = _int(info.get(f"{arch}.context_length")) if arch else None
        fim = None
        infill = False
        if self.fim_override not in ("auto", "none"):
            fim = FORMATS_BY_NAME.get(self.fim_override)
            note = f"FIM format {self.fim_override} (model.fimFormat), raw prompts"
        elif isinstance(vocabulary, list):
            tokens = set(vocabulary)
            fim, note = fim_from_vocabulary(lambda t: t in tokens, self.fim_override)
        else:
            note = "no vocabulary in /api/show"
        if fim is None and self.fim_override == "auto" and "insert" in capabilities:
            infill = True
            note = "FIM by the model's template (prompt + suffix)"
        elif fim is None:
            note += ": prefix-only prompts"
        self.info = EngineInfo(
            engine=self.engine,
            url=self.url,
            model=name,
            fim=fim,
            infill=infill,
            context_length=context,
            chars_per_token=DEFAULT_CHARS_PER_TOKEN,
            notes=(note,),
        )
        return self.info

    def body(self, request: GenerateRequest) -> dict[str, Any]:
        assert self.info is not None
        pieces = request.prompt
        options: dict[str, Any] = {"temperature": 0, "top_k": 1, "num_predict": request.max_tokens}
        fim_stops = self.info.fim.stop_tokens if self.info.fim and not request.raw else ()
        stops = list(request.stop) + list(fim_stops)
        if stops:
            options["stop"] = stops
        body: dict[str, Any] = {
            "model": self.info.model,
            "stream": True,
            "keep_alive": KEEP_ALIVE,
            "options": options,
        }
        if self.info.infill and not request.raw:
            extra = "".join(text for _, text in pieces.extra)
            body.update(prompt=extra + pieces.prefix, suffix=pieces.suffix)
        else:
            body.update(prompt=pieces.text, raw=True)
        return body

    def streamed(self, request: GenerateRequest) -> tuple[str, dict[str, Any], StreamReader]:
        return "/api/generate", self.body(request), _Events()


class _Events(StreamReader):
    """Ollama's NDJSON objects: `response` text; `done` on the last, with its counts."""

    def __init__(self) -> None:
        self.last: dict[str, Any] | None = None  # the `done` object

    def events(self, lines: Iterator[str], url: str) -> Iterator[dict[str, Any]]:
        return http.ndjson(lines, url)

    def pieces(self, event: dict[str, Any]) -> Iterator[str]:
        yield str(event.get("response") or "")
        if event.get("done"):
            self.finish, self.last = str(event.get("done_reason") or "stop"), event

    def counts(self) -> dict[str, Any]:
        if self.last is None:
            return {}
        return {
            "prefilled_tokens": _int(self.last.get("prompt_eval_count")),
            "completion_tokens": _int(self.last.get("eval_count")),
            "extra": {
                "promptMs": _ms(self.last.get("prompt_eval_duration")),
                "decodeMs": _ms(self.last.get("eval_duration")),
            },
        }


def _ms(nanoseconds: Any) -> float | None:
    value = _int(nanoseconds)
    return None if value is None else round(value / 1e6, 2)
