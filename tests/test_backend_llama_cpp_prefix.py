"""A model without FIM tokens on a real llama.cpp server (SmolLM2-135M): /infill refuses it, so
completions fall back to /completion with the code before the cursor, said once in the log."""

from __future__ import annotations

import logging

import pytest
from engines import SMOLLM_GGUF, llama_server

from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.llama_cpp import LlamaCppClient
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.pipeline.request import CompletionRequest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    process = llama_server(SMOLLM_GGUF, tmp_path_factory.mktemp("llama-logs")).start()
    yield process
    process.stop()


def test_no_fim_tokens_means_prefix_only_through_completion(engine, caplog):
    backend = LlamaCppClient(engine.url)
    info = backend.probe(engine_http.deadline_in(30))
    assert not info.infill and info.fim is None
    assert any("no /infill" in note and "prefix-only" in note for note in info.notes)
    caplog.set_level(logging.INFO)
    remote = EngineBackend(LlamaCppClient(engine.url), timeout_s=30)
    text = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n'
    text += "        return n\n    return \n"
    completion = remote.complete(CompletionRequest(text=text, line=4, column=11, max_new_tokens=16))
    assert completion.text.startswith("fibonacci(n - 1)")
    assert completion.stats["engine"]["prefilledTokens"] > 0
    assert "prefix-only" in caplog.text
    prompt = remote.prepare(CompletionRequest(text=text, line=4, column=11))
    assert prompt.text.endswith("    return") and prompt.healed == " "  # the blank is healed
