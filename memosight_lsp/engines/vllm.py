"""vLLM's OpenAI-compatible server: `/v1/completions` with the FIM prompt as token ids.

vLLM rejects `suffix`, so the FIM prompt is ours, tokenized by vLLM's own tokenizer
(`/tokenize`, which also says which FIM markers are single tokens of the vocabulary) and sent as
token ids, with the FIM stop tokens as `stop_token_ids`. The prefix cache (automatic prefix
caching, on by default) is what makes keystrokes cheap: the packed prompt is ordered
stable-first (context/pack.py). Per request, `usage.prompt_tokens_details.cached_tokens` is
reported when the server runs with `--enable-prompt-tokens-details`; the server-wide hit rate
is in `/metrics` (`prefix_cache_hits_total / prefix_cache_queries_total`, see `metrics`).
"""

from __future__ import annotations

import re
from typing import Any

from . import http
from .base import (
    CALIBRATION_TEXT,
    EngineInfo,
    GenerateRequest,
    fim_from_vocabulary,
)
from .openai import OpenAIClient, _int


class VllmClient(OpenAIClient):
    engine = "vllm"

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.stop_ids: list[int] = []

    def tokenize(self, text: str, deadline: float, *, special: bool = True) -> list[int]:
        data = http.post_json(
            self.url + "/tokenize",
            {
                "model": self.info.model if self.info else self.model,
                "prompt": text,
                "add_special_tokens": special,
            },
            watch=http.Watch(deadline),
            headers=self.headers,
        )
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise http.EngineError(f"{self.url}/tokenize: no token list in the answer", "malformed")
        return tokens

    def has_token(self, token: str, deadline: float) -> bool:
        return len(self.tokenize(token, deadline, special=False)) == 1

    def probe(self, deadline: float) -> EngineInfo:
        entry = self.pick_model(self.served_models(deadline))
        self.info = EngineInfo(engine=self.engine, url=self.url, model=entry["id"], fim=None)
        single: dict[str, int | None] = {}

        def has_token(marker: str) -> bool:
            if marker not in single:
                ids = self.tokenize(marker, deadline, special=False)
                single[marker] = ids[0] if len(ids) == 1 else None
            return single[marker] is not None

        fim, note = fim_from_vocabulary(has_token, self.fim_override)
        self.stop_ids = []
        if fim is not None:
            for token in fim.stop_tokens:
                if has_token(token):
                    self.stop_ids.append(single[token])  # type: ignore[arg-type]
        sample = self.tokenize(CALIBRATION_TEXT, deadline, special=False)
        self.info = EngineInfo(
            engine=self.engine,
            url=self.url,
            model=entry["id"],
            fim=fim,
            context_length=_int(entry.get("max_model_len")),
            chars_per_token=len(CALIBRATION_TEXT) / max(1, len(sample)),
            token_ids=True,
            notes=(note,),
        )
        return self.info

    def prompt(self, request: GenerateRequest, deadline: float) -> tuple[Any, int | None]:
        ids = self.tokenize(request.prompt.text, deadline)
        return ids, len(ids)

    def extra_body(self) -> dict[str, Any]:
        return {"stop_token_ids": self.stop_ids} if self.stop_ids else {}

    def stop_strings(self, request: GenerateRequest) -> list[str]:
        return list(request.stop)  # the FIM stop tokens go as ids

    def metrics(self, deadline: float) -> dict[str, float]:
        """The engine's counters from /metrics, summed over labels (see prometheus_totals)."""
        text = http.get_text(
            self.url + "/metrics", watch=http.Watch(deadline), headers=self.headers
        )
        return prometheus_totals(text)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfaN]+)")


def prometheus_totals(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        totals[match.group(1)] = totals.get(match.group(1), 0.0) + value
    return totals


def prefix_cache_counts(totals: dict[str, float]) -> tuple[float, float]:
    """(queried, hit) prompt tokens of vLLM's prefix cache: their ratio is the hit rate."""
    return (
        totals.get("vllm:prefix_cache_queries_total", 0.0),
        totals.get("vllm:prefix_cache_hits_total", 0.0),
    )
