"""Next edits through a serving engine (model.backend): the same window, prompt family and
proposals as the local model (predict.py), the rewrite a raw completion of the prompt's text.

The engine is asked through its raw completion endpoint (llama.cpp /completion, /v1/completions,
Ollama /api/generate raw) by EngineBackend.complete_raw, with the backends' streaming
client, health and backoff: greedy, at most the window's tokens + a quarter + 16 (counted by the
engine's /tokenize where it has one), stopping at the prompt's end marker, and by
completion.maxWaitMs with the text so far. The engine applies no chat template to a raw prompt,
so the prompt family is picked from the served model's name and vocabulary
(prompt.choose_family: ChatML text for a ChatML model, else plain, unless the model
is made for next edits). An engine that is down, too slow or refuses answers empty with a
reason; nothing here raises on what the engine sends.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from memosight_lsp.engines.http import deadline_in
from memosight_lsp.pipeline.engine_backend import EngineBackend

from .predict import NextEdit, NextEditRequest, finish, rewrite_budget, window_of
from .prompt import ModelTraits


class RemoteNextEditor:
    """Predicts next edits with a serving engine. Not thread-safe: one worker calls it."""

    def __init__(self, backend: EngineBackend) -> None:
        self.backend = backend

    def predict(
        self, request: NextEditRequest, *, cancelled: Callable[[], bool] | None = None
    ) -> NextEdit | str:
        """The engine's next edit, or why there is none (the engine is down, too slow, refused
        the request, or the request was cancelled)."""
        started = time.perf_counter()
        deadline = deadline_in(request.max_wait_ms / 1000)
        backend = self.backend
        window = window_of(request)
        info = backend.connect(deadline)
        if info is None:
            return f"engine unavailable: {backend.health.message or 'not reachable'}"
        traits = ModelTraits(name=info.model, has_token=backend.has_token)
        prompt = window.prompt(traits, request)
        draft_tokens = backend.count_exact(prompt.draft_text(window.text), deadline)
        answer = backend.complete_raw(
            prompt.text,
            max_tokens=rewrite_budget(draft_tokens),
            stop=prompt.stops,
            deadline=deadline,
            on_text=lambda text: prompt.end in text,
            cancelled=cancelled,
        )
        result = answer.result
        if result is None:
            return answer.reason or "the engine gave no answer"
        rewrite, ended = prompt.answer_of(result.text)
        first_ms = result.first_token_ms or 0.0
        edit = NextEdit(
            hunks=[],
            rewrite=rewrite,
            # The engine stops at the end marker (and drops it) or at the end of text.
            complete=ended or result.finish == "stop",
            family=prompt.family,
            model=info.model,
            prompt_tokens=result.prompt_tokens or 0,
            new_tokens=result.completion_tokens or 0,
            draft_tokens=draft_tokens,
            prefill_ms=first_ms,
            decode_ms=max(0.0, result.total_ms - first_ms),
            stop_reason=result.finish,
            stats={"engine": {"name": info.engine, **result.stats()}},
        )
        finish(edit, request, window)
        edit.total_ms = (time.perf_counter() - started) * 1000
        return edit
