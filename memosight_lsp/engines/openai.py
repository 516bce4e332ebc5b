"""Any OpenAI-compatible completions endpoint (`POST /v1/completions`, streamed).

The legacy completions API takes a prompt and returns its continuation; it has no tokenizer
endpoint, so the FIM format comes from `model.fimFormat` only (auto: prefix-only prompts) and
tokens are counted as characters / 4. vLLM (vllm.py) is this plus its tokenizer and metrics.
Usage (`prompt_tokens`, `completion_tokens`, `prompt_tokens_details.cached_tokens`) is asked
for with `stream_options.include_usage`, which servers that do not know it ignore.
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
)

MAX_STOP = 4  # the OpenAI API takes at most four stop sequences


def api_root(url: str) -> str:
    """The server's root from what a user may write: with or without a trailing /v1."""
    root = url.rstrip("/")
    return root.removesuffix("/v1")


class OpenAIClient(EngineClient):
    engine = "openai"

    root = staticmethod(api_root)

    # -- probe ------------------------------------------------------------------------------

    def served_models(self, deadline: float) -> list[dict[str, Any]]:
        data = http.get_json(
            self.url + "/v1/models", watch=http.Watch(deadline), headers=self.headers
        )
        models = data.get("data") if isinstance(data, dict) else None
        if not isinstance(models, list):
            raise http.EngineError(
                f"{self.url}/v1/models: no model list in the answer", "malformed"
            )
        return [m for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]

    def pick_model(self, models: list[dict[str, Any]]) -> dict[str, Any]:
        """The model asked for (model.name), or the only/first one the server serves."""
        names = [m["id"] for m in models]
        if self.model is None:
            if not models:
                raise http.EngineError(f"{self.url} serves no model", "status", 404)
            return models[0]
        for entry in models:
            if entry["id"] == self.model:
                return entry
        served = ", ".join(names) or "nothing"
        raise http.EngineError(
            f"{self.engine} at {self.url} does not serve model {self.model!r} (it serves: "
            f"{served}); fix model.name",
            "status",
            404,
        )

    def probe(self, deadline: float) -> EngineInfo:
        entry = self.pick_model(self.served_models(deadline))
        fim = (
            None
            if self.fim_override in ("auto", "none")
            else FORMATS_BY_NAME.get(self.fim_override)
        )
        note = (
            f"FIM format {fim.name} (model.fimFormat)"
            if fim
            else "no tokenizer endpoint: prefix-only prompts unless model.fimFormat names one"
        )
        self.info = EngineInfo(
            engine=self.engine,
            url=self.url,
            model=entry["id"],
            fim=fim,
            context_length=_int(entry.get("max_model_len")),
            chars_per_token=DEFAULT_CHARS_PER_TOKEN,
            notes=(note,),
        )
        return self.info

    # -- generate ---------------------------------------------------------------------------

    def prompt(self, request: GenerateRequest, deadline: float) -> tuple[Any, int | None]:
        """What goes in the request's `prompt` (text here; token ids for vLLM) and its length
        in tokens when known."""
        return request.prompt.text, None

    def extra_body(self) -> dict[str, Any]:
        return {}

    def stop_strings(self, request: GenerateRequest) -> list[str]:
        info = self.info
        stops = list(request.stop)
        if info is not None and info.fim is not None and not request.raw:
            stops += [s for s in info.fim.stop_tokens if s not in stops]
        return stops[:MAX_STOP]

    def streamed(self, request: GenerateRequest) -> tuple[str, dict[str, Any], StreamReader]:
        assert self.info is not None
        prompt, prompt_tokens = self.prompt(request, request.deadline)
        body = {
            "model": self.info.model,
            "prompt": prompt,
            "max_tokens": request.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **({} if request.raw else self.extra_body()),
        }
        stops = self.stop_strings(request)
        if stops:
            body["stop"] = stops
        return "/v1/completions", body, _Events(prompt_tokens)


class _Events(StreamReader):
    """OpenAI-style completion chunks: the text of each choice, its `finish_reason`, and the
    `usage` in a chunk of its own after the finish (`include_usage`): read to the end."""

    read_to_end = True

    def __init__(self, prompt_tokens: int | None) -> None:
        self.prompt_tokens = prompt_tokens  # known before the request (vLLM: token ids sent)
        self.usage: dict[str, Any] = {}

    def pieces(self, event: dict[str, Any]) -> Iterator[str]:
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            yield str(choice.get("text") or "")
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def counts(self) -> dict[str, Any]:
        return _counts(self.usage, self.prompt_tokens)


def _counts(usage: dict[str, Any], prompt_tokens: int | None) -> dict[str, Any]:
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    prompt = _int(usage.get("prompt_tokens")) or prompt_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": _int(usage.get("completion_tokens")),
        "cached_tokens": cached,
        "prefilled_tokens": None if cached is None or prompt is None else prompt - cached,
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
