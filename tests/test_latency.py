"""The latency flow in LocalBackend with a tiny real model: prompts sized to the measured
prefill rate, the first-response deadline (what is verified by then, then the whole
completion), and pre-warm (prefilled ahead, reused, the same completion)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace

import pytest
from tiny_models import STDLIB

from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline.latency import MIN_PROMPT_TOKENS
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.prompt import MARKER_RESERVE
from memosight_lsp.pipeline.request import Completion, CompletionRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = (STDLIB / "textwrap.py").read_text()
LINES = TEXT.split("\n")


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model(tiny_model_dir, device="cpu")


def engine_for(loaded, rate: float | None = None) -> LocalBackend:
    engine = LocalBackend(loaded, time_passes=False)
    if rate is not None:
        engine.prefill_rate.observe(1000, 1000 * 1000 / rate)
    return engine


def cursors(count: int, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        line = rng.randrange(40, len(LINES) - 1)
        out.append((line, rng.randrange(0, len(LINES[line]) + 1)))
    return out


def request(line: int, column: int, **extra) -> CompletionRequest:
    fields = dict(
        text=TEXT,
        line=line,
        column=column,
        path="/w/textwrap.py",
        language_id="python",
        mid_word="complete",
        max_new_tokens=24,
    )
    return CompletionRequest(**{**fields, **extra})


def same(a: Completion, b: Completion) -> None:
    assert (a.raw, a.text, a.stop_reason, a.new_tokens) == (
        b.raw,
        b.text,
        b.stop_reason,
        b.new_tokens,
    )


def test_warm_up_measures_the_prefill_rate(loaded):
    engine = engine_for(loaded)
    req = request(100, 0)
    assert engine.prefill_rate.settled is None
    whole = engine.latency_budget(req)
    assert whole.prompt_tokens == whole.max_prompt_tokens and whole.prefill_chunk == 0
    engine.warm_up()
    assert engine.prefill_rate.settled is not None and engine.prefill_rate.samples == 1
    assert engine.latency(req)["prefillRate"]["tokensPerS"] > 0
    # Completions refine the rate once it is measured.
    engine.complete(request(100, 0, buffer_id="file:///a.py"))
    assert engine.prefill_rate.samples == 2


def test_a_slow_model_gets_a_smaller_prompt(loaded):
    slow, fast, unmeasured = engine_for(loaded, 50), engine_for(loaded, 1e6), engine_for(loaded)
    line, column = 300, 0
    report = slow.latency(request(line, column))  # before the completion's own sample moves it
    assert report["promptTokens"] == MIN_PROMPT_TOKENS and report["prefillChunk"] == 64
    assert report["stablePrompts"] == {"buffers": 0, "reused": 0, "packed": 0}
    small = slow.complete(request(line, column))
    large = fast.complete(request(line, column))
    whole = unmeasured.complete(request(line, column))
    assert small.prompt_tokens <= MIN_PROMPT_TOKENS + MARKER_RESERVE
    assert small.prompt_tokens < large.prompt_tokens <= whole.prompt_tokens


@pytest.mark.parametrize("plain", [True, False])
def test_a_deadline_answers_with_what_is_verified_then_the_whole_completion(loaded, plain):
    engine, reference = engine_for(loaded, 2000), engine_for(loaded, 2000)
    shown_any = False
    for i, (line, column) in enumerate(cursors(10, seed=3)):
        req = request(line, column, plain=plain, buffer_id=f"file:///{i}.py")
        partials: list[Completion] = []
        got = engine.complete(req, deadline=time.monotonic(), on_partial=partials.append)
        want = reference.complete(req)
        same(got, want)  # the deadline changes nothing in the completion itself
        # Past the deadline each new verified text is handed on, never an empty one: the editor
        # would show nothing until the next keystroke.
        assert all(p.text for p in partials), "an empty early answer"
        assert all(p.stop_reason == "partial" for p in partials)
        texts = [p.text for p in partials]
        assert len(set(texts)) == len(texts)  # handed on again only when it changed
        for text in texts:
            common = min(len(text), len(got.text))
            assert text[:common] == got.text[:common], (text, got.text)
            shown_any |= bool(text)
        # Prefixes of the raw output, token by token.
        assert all(got.raw.startswith(p.raw) for p in partials)
        assert [p.new_tokens for p in partials] == sorted(p.new_tokens for p in partials)
    assert shown_any


def test_no_partial_answer_before_the_deadline(loaded):
    engine = engine_for(loaded, 2000)
    partials: list[Completion] = []
    got = engine.complete(
        request(200, 0), deadline=time.monotonic() + 3600, on_partial=partials.append
    )
    assert partials == [] and got.stop_reason != "partial"


def test_decoding_ends_by_max_wait_with_what_is_verified(loaded):
    """completion.maxWaitMs bounds the model's work: past it the request ends (stop reason
    "time") with its verified text cut at a whole word or line, a prefix of the whole answer."""
    engine, reference = engine_for(loaded, 2000), engine_for(loaded, 2000)
    requests = [
        request(line, column, max_new_tokens=64, buffer_id=f"file:///wait{i}.py")
        for i, (line, column) in enumerate(cursors(10, seed=5))
    ]
    wholes = [(req, reference.complete(req)) for req in requests]
    req, whole = max(wholes, key=lambda pair: pair[1].new_tokens)
    assert whole.stop_reason != "time" and whole.new_tokens > 4
    stopped = engine.complete(replace(req, max_wait_ms=0))
    assert stopped.stop_reason == "time"
    assert stopped.new_tokens < whole.new_tokens
    assert whole.text.startswith(stopped.text)
    if not stopped.text:
        assert stopped.reason == "nothing verified within completion.maxWaitMs"


def test_a_deadline_that_comes_later_is_heard_mid_decode(loaded):
    """A callable deadline (a precompute that a request joins) is asked at every step: none at
    first, then the joining request's; partial answers start once it came, at the first step
    with text."""
    engine, reference = engine_for(loaded, 2000), engine_for(loaded, 2000)
    joined = answered = 0
    for i, (line, column) in enumerate(cursors(10, seed=3)):
        req = request(line, column, buffer_id=f"file:///joined{i}.py")
        want = reference.complete(req)
        asked: list[int] = []
        seen: list[tuple[int, Completion]] = []

        def deadline(asked: list[int] = asked) -> float:
            asked.append(1)
            return 0.0 if len(asked) >= 2 else math.inf  # joined (and due) at the second

        def heard(partial: Completion, asked: list[int] = asked, seen: list = seen) -> None:
            seen.append((len(asked), partial))

        got = engine.complete(req, deadline=deadline, on_partial=heard)
        same(got, want)
        if len(asked) < 2:
            assert not seen  # ended before anyone joined
            continue
        joined += 1
        assert all(step >= 2 for step, _ in seen), "nothing before the join"
        assert all(p.text for _, p in seen)
        answered += bool(seen)
        assert all(want.raw.startswith(p.raw) for _, p in seen)
    assert joined >= 3 and answered >= 1


def test_prewarm_is_reused_and_gives_the_same_completion(loaded):
    # A rate whose sizes are at their caps: the samples of the tiny model's own prefills (fast or
    # slow on a busy machine) do not change the prompt between the pre-warm and the completion.
    engine, reference = engine_for(loaded, 1e6), engine_for(loaded, 1e6)
    for i, (line, column) in enumerate(cursors(4, seed=5)):
        req = request(line, column, buffer_id=f"file:///w{i}.py")
        done = engine.prewarm(req)
        assert not done["cancelled"] and done["reusedPromptTokens"] == 0
        assert done["prefilledTokens"] == done["promptTokens"] > 0
        got = engine.complete(req)
        assert got.stats["reusedPromptTokens"] == got.prompt_tokens - 1
        same(got, reference.complete(req))
        # Pre-warming what is already prefilled prefills one token.
        assert engine.prewarm(req)["prefilledTokens"] <= got.prompt_tokens


def test_a_guessed_prewarm_pins_no_head_and_is_reused_all_the_same(loaded):
    engine, reference = engine_for(loaded, 1e6), engine_for(loaded, 1e6)
    req = request(200, 0, buffer_id="file:///g.py")
    done = engine.prewarm(req, pin=False)  # a file just opened: the cursor is a guess
    assert done["prefilledTokens"] == done["promptTokens"] > 0
    assert "file:///g.py" not in engine.stable  # the first request packs for its own cursor
    got = engine.complete(req)
    assert got.stats["reusedPromptTokens"] == got.prompt_tokens - 1  # the same prompt here
    same(got, reference.complete(req))
    engine.prewarm(request(100, 0, buffer_id="file:///k.py"))  # a known cursor pins its head
    assert "file:///k.py" in engine.stable


def test_prewarm_is_off_for_plain_decoding_and_one_off_requests(loaded):
    engine = engine_for(loaded, 2000)
    for req in (request(100, 0, buffer_id="file:///p.py", plain=True), request(100, 0)):
        assert engine.prewarm(req) == {"promptTokens": 0, "prefilledTokens": 0, "cancelled": False}
    assert len(engine.decoder.prefix_cache) == 0


def test_a_cancelled_prewarm_keeps_its_part_for_the_completion(loaded):
    engine, reference = engine_for(loaded, 100), engine_for(loaded, 100)  # 64-token chunks
    req = request(300, 0, buffer_id="file:///c.py")
    chunk = engine.latency_budget(req).prefill_chunk
    assert chunk == 64
    polls = []
    done = engine.prewarm(req, cancelled=lambda: polls.append(1) or len(polls) >= 2)
    assert done["cancelled"] and done["prefilledTokens"] == 2 * chunk  # the two chunks kept
    got = engine.complete(req)
    assert got.stats["reusedPromptTokens"] == 2 * chunk
    same(got, reference.complete(req))
