"""What no real engine shows on demand: an engine that is down, stalls, cuts a stream, sends
garbage or an HTTP error. Each ends by the deadline with one clear error, and a cancelled
stream is closed at once. Against a tiny loopback server (tests/fake_engine.py)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from fake_engine import FakeEngine, Handler, sse

from memosight_lsp.engines import (
    Cancelled,
    EngineError,
    GenerateRequest,
    PromptPieces,
)
from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.openai import OpenAIClient
from memosight_lsp.pipeline.engine_backend import NOT_THE_WORD, EngineBackend
from memosight_lsp.pipeline.request import CompletionRequest

MODELS = {"object": "list", "data": [{"id": "tiny", "max_model_len": 2048}]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def models(handler: Handler, body) -> None:
    handler.send_json(MODELS)


def chunk(text: str, finish: str | None = None) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def request(text: str = "def f():\n    return", seconds: float = 2.0) -> GenerateRequest:
    return GenerateRequest(
        prompt=PromptPieces(text=text, prefix=text, suffix=""),
        max_tokens=16,
        deadline=engine_http.deadline_in(seconds),
    )


def generate(engine: FakeEngine, seconds: float = 2.0, cancelled=engine_http.never, on_text=None):
    backend = OpenAIClient(engine.url)
    return backend.generate(
        request(seconds=seconds), on_text=on_text or (lambda text: False), cancelled=cancelled
    )


def test_an_engine_that_is_down_is_unreachable_at_once():
    backend = OpenAIClient(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        backend.probe(engine_http.deadline_in(5))
    assert err.value.kind == "unreachable"
    assert "connection refused" in str(err.value)
    assert time.monotonic() - started < 1.0


def test_an_engine_that_never_answers_is_given_up_on_by_the_deadline():
    def stall(handler: Handler, body) -> None:
        time.sleep(3)
        handler.send_json(MODELS)

    with FakeEngine({("GET", "/v1/models"): stall}) as engine:
        started = time.monotonic()
        with pytest.raises(EngineError) as err:
            OpenAIClient(engine.url).probe(engine_http.deadline_in(0.3))
        assert err.value.kind == "timeout"
        assert time.monotonic() - started < 0.6


def test_a_stream_that_stalls_midway_ends_by_the_deadline_with_the_text_so_far():
    def completions(handler: Handler, body) -> None:
        handler.stream([*sse(chunk("    return 1")), *sse(chunk("\n"))], delay_s=2.0)

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine:
        started = time.monotonic()
        result = generate(engine, seconds=0.5)
        assert time.monotonic() - started < 0.8
    assert result.finish == "deadline"
    assert result.text == "    return 1"


def test_a_stream_cut_midway_is_an_error_not_a_completion():
    def completions(handler: Handler, body) -> None:
        handler.cut(sse(chunk("    return")))

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine, pytest.raises(EngineError) as err:
        generate(engine)
    assert err.value.kind == "cut"


def test_a_malformed_event_is_an_error():
    def completions(handler: Handler, body) -> None:
        handler.stream([b"data: {not json\n\n"])

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine, pytest.raises(EngineError) as err:
        generate(engine)
    assert err.value.kind == "malformed"


def test_a_model_list_that_is_not_one_is_malformed():
    def bad(handler: Handler, body) -> None:
        handler.send_raw(b"<html>gateway</html>", kind="text/html")

    with FakeEngine({("GET", "/v1/models"): bad}) as engine, pytest.raises(EngineError) as err:
        OpenAIClient(engine.url).probe(engine_http.deadline_in(2))
    assert err.value.kind == "malformed"


def test_an_http_error_carries_the_engines_own_words():
    def boom(handler: Handler, body) -> None:
        handler.send_json({"error": {"message": "CUDA out of memory", "type": "server"}}, 500)

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): boom}
    with FakeEngine(routes) as engine, pytest.raises(EngineError) as err:
        generate(engine)
    assert err.value.kind == "status"
    assert err.value.status == 500
    assert "CUDA out of memory" in str(err.value)


def test_a_wrong_model_name_says_what_the_engine_serves():
    with FakeEngine({("GET", "/v1/models"): models}) as engine, pytest.raises(EngineError) as err:
        OpenAIClient(engine.url, model="gpt-9").probe(engine_http.deadline_in(2))
    assert "does not serve model 'gpt-9'" in str(err.value)
    assert "tiny" in str(err.value)


def test_cancelling_closes_the_stream_at_once():
    def completions(handler: Handler, body) -> None:
        handler.stream(sse(*(chunk(" x") for _ in range(200))), delay_s=0.02)

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine:
        flag = threading.Event()
        threading.Timer(0.2, flag.set).start()
        started = time.monotonic()
        with pytest.raises(Cancelled):
            generate(engine, seconds=10, cancelled=flag.is_set)
        assert time.monotonic() - started < 0.35
        deadline = time.monotonic() + 2
        while engine.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert engine.disconnects == 1  # the engine saw the client go: it stops generating


def test_enough_text_closes_the_stream_without_waiting_for_the_rest():
    def completions(handler: Handler, body) -> None:
        handler.stream(
            sse(chunk(" 1"), chunk("\n"), *(chunk(" x") for _ in range(100))), delay_s=0.02
        )

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine:
        started = time.monotonic()
        result = generate(engine, on_text=lambda text: "\n" in text)
        assert time.monotonic() - started < 0.5
    assert result.finish == "enough"
    assert result.text == " 1\n"


def test_usage_and_cached_tokens_come_from_the_stream():
    def completions(handler: Handler, body) -> None:
        usage = {
            "prompt_tokens": 40,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 32},
        }
        handler.stream(
            sse(chunk(" 1"), chunk("", "stop"), {"choices": [], "usage": usage}, "[DONE]")
        )

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine:
        result = generate(engine)
        sent = engine.bodies("/v1/completions")[0]
    assert result.text == " 1"
    assert result.finish == "stop"
    assert (result.prompt_tokens, result.cached_tokens, result.prefilled_tokens) == (40, 32, 8)
    assert sent["stream"] is True and sent["temperature"] == 0 and sent["model"] == "tiny"


# -- the remote engine: status, backoff, recovery --------------------------------------------


def completion_request() -> CompletionRequest:
    return CompletionRequest(text="def add(a, b):\n    return \n", line=1, column=11)


def test_an_engine_down_answers_empty_at_once_with_one_status_and_recovers():
    port = free_port()
    healths: list[tuple[bool, str]] = []
    remote = EngineBackend(
        OpenAIClient(f"http://127.0.0.1:{port}"),
        timeout_s=2,
        on_health=lambda up, message: healths.append((up, message)),
    )
    started = time.monotonic()
    first = remote.complete(completion_request())
    second = remote.complete(completion_request())  # within the backoff: no connection at all
    assert time.monotonic() - started < 1.0
    assert first.text == "" and first.stop_reason == "unavailable"
    assert "connection refused" in (first.reason or "")
    assert second.stop_reason == "unavailable"
    assert healths == [(False, healths[0][1])]  # one status message, not one per request

    def completions(handler: Handler, body) -> None:
        handler.stream(sse(chunk(" a + b"), chunk("\n", "stop"), "[DONE]"))

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes, port=port):  # the engine is back, on the same port
        time.sleep(0.6)  # the first backoff step
        back = remote.complete(completion_request())
    assert back.text == "a + b"
    assert healths[-1][0] is True and "ready" in healths[-1][1]
    assert back.stats["engine"]["name"] == "openai"


def test_a_slow_engine_is_not_marked_down():
    def stall(handler: Handler, body) -> None:
        time.sleep(2)

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): stall}
    healths: list[bool] = []
    with FakeEngine(routes) as engine:
        remote = EngineBackend(
            OpenAIClient(engine.url), timeout_s=0.4, on_health=lambda up, m: healths.append(up)
        )
        started = time.monotonic()
        answer = remote.complete(completion_request())
        assert time.monotonic() - started < 0.8
    assert answer.text == "" and answer.stop_reason == "deadline"
    assert "model.timeoutMs" in (answer.reason or "")
    assert healths == [True]  # it answered the probe: slow, not down


def test_a_partial_word_is_healed_by_the_model_or_the_answer_dropped():
    answers = iter([" TypeError(msg)\n", " ValueError(msg)\n"])

    def completions(handler: Handler, body) -> None:
        handler.stream(sse(chunk(next(answers)), chunk("", "stop"), "[DONE]"))

    routes = {("GET", "/v1/models"): models, ("POST", "/v1/completions"): completions}
    with FakeEngine(routes) as engine:
        remote = EngineBackend(OpenAIClient(engine.url), timeout_s=2)
        request = CompletionRequest(text="def f(msg):\n    raise TypeErr\n", line=1, column=17)
        healed = remote.complete(request)
        diverged = remote.complete(request)
        prompts = [body["prompt"] for body in engine.bodies("/v1/completions")]
    assert prompts[0].endswith("    raise")  # " TypeErr" backed off: the model writes it again
    assert healed.text == "or(msg)"
    assert diverged.text == "" and diverged.reason == NOT_THE_WORD
