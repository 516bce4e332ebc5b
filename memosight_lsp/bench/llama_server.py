"""A llama.cpp server (`llama-server`) as the anchor of a benchmark: the same prompts, token ids
and greedy settings sent over HTTP to the engine users would otherwise pick.

Only the standard library: benchmarks must not pull in an HTTP stack. Loopback only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


class LlamaServerError(Exception):
    """The server is not reachable or answered something unusable (one line)."""


@dataclass(frozen=True, kw_only=True)
class LlamaResult:
    text: str
    tokens: list[int]
    prompt_tokens: int  # prompt positions the server computed (not taken from its cache)
    cached_tokens: int
    prompt_ms: float
    decode_ms: float
    predicted: int
    seconds: float  # wall time of the request


class LlamaServer:
    def __init__(self, url: str, *, timeout_s: float = 600) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                data = json.loads(response.read())
        except (urllib.error.URLError, TimeoutError, ValueError, OSError) as err:
            raise LlamaServerError(f"llama-server at {self.url}{path}: {err}") from err
        if not isinstance(data, dict):
            raise LlamaServerError(f"llama-server at {self.url}{path}: not a JSON object")
        return data

    def props(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.url + "/props", timeout=30) as response:
                data = json.loads(response.read())
        except (urllib.error.URLError, TimeoutError, ValueError, OSError) as err:
            raise LlamaServerError(f"llama-server at {self.url}/props: {err}") from err
        return data if isinstance(data, dict) else {}

    def complete(
        self, prompt_ids: list[int], max_new_tokens: int, *, cache_prompt: bool = True
    ) -> LlamaResult:
        """Greedy decoding of up to max_new_tokens after the prompt's token ids."""
        started = time.perf_counter()
        data = self.post(
            "/completion",
            {
                "prompt": prompt_ids,
                "n_predict": max_new_tokens,
                "temperature": 0,
                "top_k": 1,
                "samplers": ["top_k"],
                "cache_prompt": cache_prompt,
                "return_tokens": True,
            },
        )
        return _result(data, time.perf_counter() - started)

    def infill(self, body: dict[str, Any]) -> LlamaResult:
        started = time.perf_counter()
        data = self.post("/infill", {"temperature": 0, "top_k": 1, "samplers": ["top_k"], **body})
        return _result(data, time.perf_counter() - started)


def _result(data: dict[str, Any], seconds: float) -> LlamaResult:
    timings = data.get("timings") or {}
    tokens = data.get("tokens") or []
    return LlamaResult(
        text=str(data.get("content", "")),
        tokens=[int(t) for t in tokens] if isinstance(tokens, list) else [],
        prompt_tokens=int(timings.get("prompt_n", 0) or 0),
        cached_tokens=int(timings.get("cache_n", 0) or 0),
        prompt_ms=float(timings.get("prompt_ms", 0.0) or 0.0),
        decode_ms=float(timings.get("predicted_ms", 0.0) or 0.0),
        predicted=int(timings.get("predicted_n", len(tokens)) or 0),
        seconds=seconds,
    )
