"""llama.cpp's server (`llama-server`): `/infill` with our ranked snippets as `input_extra`.

For a model with FIM tokens, llama.cpp lays the prompt out itself in the repo-level FIM pattern
(`<|repo_name|>`, one `<|file_sep|>path` per extra chunk, then prefix / suffix / middle) from the
pieces we pack: other files' snippets go as `input_extra` (one chunk per file, stable ones
first), the current file's part as `input_prefix` / `input_suffix`. `cache_prompt` keeps the
slot's KV cache between requests and `n_cache_reuse` lets it reuse shifted chunks of it;
`t_max_predict_ms` bounds the generation by the deadline. A model without FIM tokens (llama.cpp
answers /infill with an error) is asked through `/completion` with the prefix alone; an explicit
`model.fimFormat` sends our own FIM prompt there instead (llama.cpp parses its marker strings
into the special tokens, as /tokenize shows). Per request, llama.cpp reports
`timings.cache_n` (prompt tokens taken from the cache) and `timings.prompt_n` (computed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from . import http
from .base import (
    CALIBRATION_TEXT,
    EngineClient,
    EngineInfo,
    GenerateRequest,
    StreamReader,
    fim_from_vocabulary,
)
from .openai import _int, api_root

# Smallest run of tokens llama.cpp moves (KV shift) instead of recomputing, per request: the
# value llama.vim recommends for its --cache-reuse.
CACHE_REUSE = 256


class LlamaCppClient(EngineClient):
    engine = "llama.cpp"

    root = staticmethod(api_root)

    def tokenize(self, text: str, deadline: float, *, special: bool = False) -> list[int]:
        """Token ids of `text`; `special`: marker strings become their special tokens."""
        data = http.post_json(
            self.url + "/tokenize",
            {"content": text, "add_special": False, "parse_special": special},
            watch=http.Watch(deadline),
            headers=self.headers,
        )
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list):
            raise http.EngineError(f"{self.url}/tokenize: no token list in the answer", "malformed")
        return [t if isinstance(t, int) else int(t.get("id", -1)) for t in tokens]

    def has_token(self, token: str, deadline: float) -> bool:
        return len(self.tokenize(token, deadline, special=True)) == 1

    def probe(self, deadline: float) -> EngineInfo:
        props = http.get_json(self.url + "/props", watch=http.Watch(deadline), headers=self.headers)
        if not isinstance(props, dict):
            raise http.EngineError(f"{self.url}/props: not a JSON object", "malformed")
        settings = props.get("default_generation_settings") or {}
        context = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        alias, path = str(props.get("model_alias") or ""), str(props.get("model_path") or "")
        served = alias if alias and alias != path else PurePath(path).name
        if self.model and served and self.model not in (served, alias, path):
            raise http.EngineError(
                f"llama.cpp at {self.url} serves {served!r}, not {self.model!r}; fix model.name",
                "status",
                404,
            )
        sample = self.tokenize(CALIBRATION_TEXT, deadline)
        fim, note = fim_from_vocabulary(
            lambda marker: len(self.tokenize(marker, deadline, special=True)) == 1,
            self.fim_override,
        )
        notes = [note]
        infill = False
        if self.fim_override == "auto":
            infill, note = self._infill_works(deadline)
            notes.append(note)
        elif fim is not None:
            notes.append("our FIM prompt through /completion (model.fimFormat is set)")
        self.info = EngineInfo(
            engine=self.engine,
            url=self.url,
            model=served or "llama.cpp",
            fim=fim,
            infill=infill,
            context_length=context,
            chars_per_token=len(CALIBRATION_TEXT) / max(1, len(sample)),
            notes=tuple(notes),
        )
        return self.info

    def _infill_works(self, deadline: float) -> tuple[bool, str]:
        """Whether /infill serves this model (it needs FIM tokens): one tiny request."""
        try:
            http.post_json(
                self.url + "/infill",
                {
                    "input_prefix": "x = ",
                    "input_suffix": "\n",
                    "n_predict": 1,
                    "cache_prompt": False,
                },
                watch=http.Watch(deadline),
                headers=self.headers,
            )
        except http.EngineError as err:
            if err.kind != "status" or err.status in (401, 403):
                raise
            return False, f"no /infill for this model ({err}): prefix-only prompts"
        return True, "FIM by llama.cpp's /infill (repo-level pattern, snippets as input_extra)"

    def body(self, request: GenerateRequest) -> tuple[str, dict[str, Any]]:
        assert self.info is not None
        pieces = request.prompt
        common: dict[str, Any] = {
            "n_predict": request.max_tokens,
            "stream": True,
            "cache_prompt": True,
            "n_cache_reuse": CACHE_REUSE,
            "temperature": 0,
            "top_k": 1,
            "samplers": ["top_k"],
            # The generation phase ends by the deadline once a line is complete.
            "t_max_predict_ms": max(1, int((request.deadline - time.monotonic()) * 1000)),
            # Timings (cache_n, prompt_n) on every event: a stream we close early has them too.
            "timings_per_token": True,
        }
        if request.stop:
            common["stop"] = list(request.stop)
        if self.info.infill and not request.raw:
            extra = [{"filename": path, "text": text} for path, text in pieces.extra]
            return "/infill", {
                "input_prefix": pieces.prefix,
                "input_suffix": pieces.suffix,
                "input_extra": extra,
                "prompt": "",
                **common,
            }
        return "/completion", {"prompt": pieces.text, **common}

    def streamed(self, request: GenerateRequest) -> tuple[str, dict[str, Any], StreamReader]:
        path, body = self.body(request)
        return path, body, _Events()


class _Events(StreamReader):
    """llama.cpp's events: `content`, timings on each (`timings_per_token`), `stop` on the last."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}  # the latest event with timings, then the last event

    def pieces(self, event: dict[str, Any]) -> Iterator[str]:
        self.last = event if isinstance(event.get("timings"), dict) else self.last
        yield str(event.get("content") or "")
        if event.get("stop"):
            self.finish, self.last = _finish(event), event

    def counts(self) -> dict[str, Any]:
        return _counts(self.last)


def _finish(event: dict[str, Any]) -> str:
    kind = event.get("stop_type")
    if kind == "limit":
        return "length"
    if kind in ("eos", "word"):
        return "stop"
    return str(kind or "stop")


def _counts(event: dict[str, Any]) -> dict[str, Any]:
    timings: dict[str, Any] = event["timings"] if isinstance(event.get("timings"), dict) else {}
    cached = _int(timings.get("cache_n"))
    computed = _int(timings.get("prompt_n"))
    return {
        "prompt_tokens": None if cached is None or computed is None else cached + computed,
        "cached_tokens": cached,
        "prefilled_tokens": computed,
        "completion_tokens": _int(timings.get("predicted_n"))
        or _int(event.get("tokens_predicted")),
        "extra": {
            "promptMs": timings.get("prompt_ms"),
            "decodeMs": timings.get("predicted_ms"),
        },
    }
