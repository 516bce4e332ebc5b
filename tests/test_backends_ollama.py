"""Ollama's /api/show and /api/generate, against a stand-in written from Ollama's API docs:
no Ollama can be installed on these machines (its binary comes from ollama.com, not from a
package registry), so these tests check what we send and how we read what it documents."""

from __future__ import annotations

import pytest
from fake_engine import FakeEngine, Handler, ndjson

from memosight_lsp.engines import EngineError, GenerateRequest, PromptPieces
from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.ollama import OllamaClient
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.pipeline.request import CompletionRequest

QWEN_VOCAB = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "def"]


def ollama(show: dict, answer: list[dict], tags: list[str] = ("qwen2.5-coder:0.5b",)) -> dict:
    def api_show(handler: Handler, body) -> None:
        if body.get("model") not in tags:
            handler.send_json({"error": f"model '{body.get('model')}' not found"}, 404)
            return
        handler.send_json(show)

    def api_tags(handler: Handler, body) -> None:
        handler.send_json({"models": [{"name": name, "model": name} for name in tags]})

    def api_generate(handler: Handler, body) -> None:
        handler.stream(ndjson(*answer), kind="application/x-ndjson")

    return {
        ("POST", "/api/show"): api_show,
        ("GET", "/api/tags"): api_tags,
        ("POST", "/api/generate"): api_generate,
    }


def show(vocabulary: list[str] | None = None, capabilities=("completion",)) -> dict:
    info = {"general.architecture": "qwen2", "qwen2.context_length": 32768}
    if vocabulary is not None:
        info["tokenizer.ggml.tokens"] = vocabulary
    return {"template": "{{ .Prompt }}", "model_info": info, "capabilities": list(capabilities)}


ANSWER = [
    {"model": "m", "response": " a", "done": False},
    {"model": "m", "response": " + b", "done": False},
    {
        "model": "m",
        "response": "",
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 12,
        "prompt_eval_duration": 40_000_000,
        "eval_count": 3,
        "eval_duration": 30_000_000,
    },
]


def generate_request() -> GenerateRequest:
    return GenerateRequest(
        prompt=PromptPieces(
            text="<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n<|fim_middle|>",
            prefix="def add(a, b):\n    return ",
            suffix="\n",
            extra=(("util.py", "def sub(a, b): ...\n"),),
        ),
        max_tokens=16,
        deadline=engine_http.deadline_in(2),
    )


def test_fim_tokens_in_the_vocabulary_give_our_prompt_raw():
    with FakeEngine(ollama(show(QWEN_VOCAB), ANSWER)) as engine:
        backend = OllamaClient(engine.url)
        info = backend.probe(engine_http.deadline_in(2))
        assert info.fim is not None and info.fim.name == "qwen"
        assert info.model == "qwen2.5-coder:0.5b"  # the first pulled model: none was named
        assert info.context_length == 32768
        result = backend.generate(
            generate_request(), on_text=lambda t: False, cancelled=lambda: False
        )
        sent = engine.bodies("/api/generate")[0]
    assert sent["raw"] is True
    assert sent["prompt"].startswith("<|fim_prefix|>def add")
    assert "suffix" not in sent
    assert sent["options"]["temperature"] == 0 and sent["options"]["num_predict"] == 16
    assert "<|endoftext|>" in sent["options"]["stop"]
    assert result.text == " a + b" and result.finish == "stop"
    assert result.prefilled_tokens == 12 and result.completion_tokens == 3
    assert result.extra == {"promptMs": 40.0, "decodeMs": 30.0}


def test_a_template_with_a_suffix_gets_prefix_and_suffix():
    with FakeEngine(ollama(show(None, ("completion", "insert")), ANSWER)) as engine:
        backend = OllamaClient(engine.url, model="qwen2.5-coder:0.5b")
        info = backend.probe(engine_http.deadline_in(2))
        assert info.infill and info.fim is None
        backend.generate(generate_request(), on_text=lambda t: False, cancelled=lambda: False)
        sent = engine.bodies("/api/generate")[0]
    assert "raw" not in sent
    assert sent["suffix"] == "\n"
    assert sent["prompt"] == "def sub(a, b): ...\ndef add(a, b):\n    return "


def test_no_fim_at_all_sends_the_prefix_alone():
    with FakeEngine(ollama(show(["a", "b"]), ANSWER)) as engine:
        info = OllamaClient(engine.url).probe(engine_http.deadline_in(2))
    assert info.fim is None and not info.infill
    assert "prefix-only" in info.notes[0]


def test_a_model_that_is_not_pulled_is_named_in_the_error():
    with FakeEngine(ollama(show(QWEN_VOCAB), ANSWER)) as engine, pytest.raises(EngineError) as err:
        OllamaClient(engine.url, model="codellama:7b").probe(engine_http.deadline_in(2))
    assert err.value.status == 404
    assert "codellama:7b" in str(err.value)


def test_an_error_line_in_the_stream_is_an_error():
    answer = [{"response": "a", "done": False}, {"error": "llama runner process has terminated"}]
    with FakeEngine(ollama(show(QWEN_VOCAB), answer)) as engine, pytest.raises(EngineError) as err:
        backend = OllamaClient(engine.url)
        backend.generate(generate_request(), on_text=lambda t: False, cancelled=lambda: False)
    assert "runner process has terminated" in str(err.value)


def complete_through_ollama(answer: list[dict], request: CompletionRequest):
    """A completion through EngineBackend from a stand-in Ollama: it and the body Ollama got."""
    with FakeEngine(ollama(show(QWEN_VOCAB), answer)) as engine:
        completion = EngineBackend(OllamaClient(engine.url), timeout_s=2).complete(request)
        return completion, engine.bodies("/api/generate")[0]


AFTER_RETURN = CompletionRequest(text="def add(a, b):\n    return \n", line=1, column=11)


def test_a_completion_through_ollama_is_post_processed_like_any_other():
    completion, sent = complete_through_ollama(ANSWER, AFTER_RETURN)
    assert completion.text == "a + b"
    assert completion.model == "qwen2.5-coder:0.5b"
    assert completion.stats["engine"]["prefilledTokens"] == 12
    # The blank before the cursor is backed off (token healing) and written by the model.
    assert sent["prompt"].endswith("return<|fim_suffix|>\n<|fim_middle|>")


def test_on_a_blank_line_an_engine_is_not_stopped_by_its_first_line_break():
    # After a function, on the empty line: the model leaves a blank line first, then writes.
    answer = [
        {"model": "m", "response": "\n", "done": False},
        {"model": "m", "response": "def sub", "done": False},
        {"model": "m", "response": "(a, b):\n", "done": False},
        ANSWER[-1],
    ]
    blank = CompletionRequest(text="def add(a, b):\n    return a + b\n\n", line=2, column=0)
    completion, sent = complete_through_ollama(answer, blank)
    assert completion.text == "def sub(a, b):"
    assert "\n" not in sent["options"]["stop"]
    # Mid-line (after code) the engine is told to stop at the line's end, as before.
    _, sent = complete_through_ollama(ANSWER, AFTER_RETURN)
    assert "\n" in sent["options"]["stop"]
