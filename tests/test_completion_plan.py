"""The cursor's plan is made once: an engine handed a request that carries one (the server's,
made before the worker hop) follows it and makes none of its own; a request without one (the
CLI, the benchmarks) is planned by the engine. Through the server: test_server_refusal.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from memosight_lsp.engines import EngineInfo, EngineResult, GenerateRequest
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline import request as request_module
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.policy import describe_cursor
from memosight_lsp.pipeline.request import CompletionRequest, CursorPlan, plan_cursor

# Mid-expression: the engine's own plan wants one line here.
TEXT = "def add(a, b):\n    return add(a, \n"
NO_ENGINE_SAYS_THIS = "refused by the plan the request carries"


class StandIn:
    """A serving engine's backend that answers a scripted text and keeps what it was sent."""

    engine = "llama.cpp"
    url = "http://stand-in"

    def __init__(self, text: str = " b)") -> None:  # healing backs off the blank
        self.text = text
        self.requests: list[GenerateRequest] = []
        self.probes = 0

    def probe(self, deadline: float) -> EngineInfo:
        self.probes += 1
        return EngineInfo(engine="llama.cpp", url=self.url, model="served.gguf", fim=None)

    def generate(self, request, *, on_text, cancelled) -> EngineResult:
        self.requests.append(request)
        return EngineResult(text=self.text, finish="stop", completion_tokens=2)


def request(**extra) -> CompletionRequest:
    return CompletionRequest(
        text=TEXT, line=1, column=len("    return add(a, "), path="calc.py", **extra
    )


def plan(*, refused: str | None = None, multiline: bool = False) -> CursorPlan:
    situation = describe_cursor("def add(a, b):\n    return add(a, ", "\n", language="python")
    return CursorPlan(situation=situation, multiline=multiline, refused=refused)


@pytest.fixture
def no_planning(monkeypatch):
    """Making a plan fails the test: the engine must use the one it is handed."""

    def planned(*args, **kwargs):
        raise AssertionError("the engine made a plan of its own")

    monkeypatch.setattr(request_module, "plan_cursor", planned)


def test_a_serving_engine_returns_the_refusal_it_is_handed_and_sends_nothing(no_planning):
    backend = StandIn()
    completion = EngineBackend(backend).complete(request(plan=plan(refused=NO_ENGINE_SAYS_THIS)))
    assert completion.text == "" and completion.reason == NO_ENGINE_SAYS_THIS
    assert backend.probes == 0 and backend.requests == []


def test_a_serving_engine_follows_the_plan_it_is_handed(no_planning):
    backend = StandIn()
    completion = EngineBackend(backend).complete(request(plan=plan(multiline=True)))
    assert completion.multiline is True
    assert backend.requests[0].stop == ()  # a block: no stop at the line's end


def test_without_a_plan_a_serving_engine_makes_its_own():
    assert plan_cursor(request()).multiline is False
    backend = StandIn()
    completion = EngineBackend(backend).complete(request())
    assert completion.multiline is False and completion.text == "b)"
    assert backend.requests[0].stop == ("\n",)


def test_the_model_in_process_returns_the_refusal_it_is_handed(tiny_model_dir: Path, no_planning):
    engine = LocalBackend(
        load_model(str(tiny_model_dir), device="cpu"), speculative=False, time_passes=False
    )
    completion = engine.complete(request(plan=plan(refused=NO_ENGINE_SAYS_THIS)))
    assert completion.text == "" and completion.reason == NO_ENGINE_SAYS_THIS
    assert completion.new_tokens == 0 and completion.prompt_tokens == 0
