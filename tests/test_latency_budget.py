"""Prompt sizes from the measured prefill rate and completion.firstResponseMs (latency.py)."""

from __future__ import annotations

import pytest

from memosight_lsp.pipeline import latency
from memosight_lsp.pipeline.latency import LatencyBudget, PrefillRate, latency_budget

BUDGET = 1024


def sized(rate: float | None, ms: int = 300, *, budget: int = BUDGET, spm: bool = False):
    return latency_budget(budget, rate, ms, suffix_first=spm)


def test_the_cold_prompt_is_three_first_responses_of_prefill():
    # 500 tokens/s x 300 ms = 150 tokens per first response; three of them, in steps of 32.
    budget = sized(500)
    assert budget.prompt_tokens == 448
    assert budget.max_prompt_tokens == BUDGET  # a pinned head may still grow to all of it
    assert budget.suffix_tokens == 24  # a fifth of a first response, in steps of 8
    assert budget.prefill_chunk == 64  # half a first response (75), in steps of 32
    assert budget.rate == 500


def test_the_prompt_follows_the_rate_and_the_deadline():
    sizes = [sized(rate).prompt_tokens for rate in (100, 300, 500, 700, 1000, 5000)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    deadlines = [sized(500, ms).prompt_tokens for ms in (50, 200, 300, 500, 1000)]
    assert deadlines == sorted(deadlines) and deadlines[0] < deadlines[-1]
    # Only tokens per first response count: twice the rate is twice the deadline.
    for rate, ms in ((200, 300), (450, 250), (1000, 100)):
        assert sized(rate * 2, ms) == LatencyBudget(
            **{**sized(rate, ms * 2).__dict__, "rate": rate * 2}
        )


@pytest.mark.parametrize("rate", [1.0, 50.0, 120.0, 400.0, 600.0, 3000.0, 1e6])
@pytest.mark.parametrize("ms", [1, 100, 300, 2000])
def test_sizes_stay_within_their_bounds(rate, ms):
    budget = sized(rate, ms)
    headroom = BUDGET - int(BUDGET * latency.HEADROOM)
    assert latency.MIN_PROMPT_TOKENS <= budget.prompt_tokens <= headroom
    assert budget.prompt_tokens % latency.QUANTUM == 0 or budget.prompt_tokens == headroom
    assert budget.suffix_tokens is not None
    assert latency.MIN_SUFFIX_TOKENS <= budget.suffix_tokens <= latency.MAX_SUFFIX_TOKENS
    # A chunk as large as the budget is one pass (0); otherwise at least the minimum.
    assert budget.prefill_chunk == 0 or (latency.MIN_CHUNK_TOKENS <= budget.prefill_chunk < BUDGET)


def test_a_slow_model_gets_the_minimum_and_a_fast_one_all_but_the_headroom():
    slow = sized(10)
    assert slow.prompt_tokens == latency.MIN_PROMPT_TOKENS
    assert slow.suffix_tokens == latency.MIN_SUFFIX_TOKENS
    assert slow.prefill_chunk == latency.MIN_CHUNK_TOKENS
    fast = sized(1e6)
    assert fast.prompt_tokens == BUDGET - BUDGET // 8
    assert fast.suffix_tokens == latency.MAX_SUFFIX_TOKENS
    assert fast.prefill_chunk == 0  # a chunk would hold the whole budget: one pass


@pytest.mark.parametrize(
    ("rate", "ms", "budget"),
    [(None, 300, BUDGET), (500.0, 0, BUDGET), (500.0, 300, latency.MIN_PROMPT_TOKENS)],
)
def test_no_rate_no_deadline_or_a_small_budget_is_the_whole_budget(rate, ms, budget):
    got = latency_budget(budget, rate, ms, suffix_first=False)
    assert (got.prompt_tokens, got.max_prompt_tokens) == (budget, budget)
    assert got.suffix_tokens is None and got.prefill_chunk == 0


@pytest.mark.parametrize("rate", [None, 10.0, 500.0, 1e6])
def test_a_process_first_prompt_is_the_minimum_whatever_the_rate(rate):
    first = latency.latency_budget(BUDGET, rate, 300, suffix_first=False, cautious=True)
    assert first.prompt_tokens == first.max_prompt_tokens == latency.MIN_PROMPT_TOKENS
    assert first.prefill_chunk == latency.MIN_CHUNK_TOKENS and first.rate == rate
    # Without a deadline nothing is sized for one.
    whole = latency.latency_budget(BUDGET, rate, 0, suffix_first=False, cautious=True)
    assert whole.prompt_tokens == BUDGET


def test_suffix_first_prompts_leave_the_suffix_unbounded():
    psm, spm = sized(500), sized(500, spm=True)
    assert psm.suffix_tokens == 24 and spm.suffix_tokens is None
    assert (psm.prompt_tokens, psm.prefill_chunk) == (spm.prompt_tokens, spm.prefill_chunk)


def test_describe_names_the_sizes():
    assert sized(512.34).describe() == {
        "promptTokens": 448,
        "maxPromptTokens": BUDGET,
        "suffixTokens": 24,
        "prefillChunk": 64,
        "prefillTokensPerS": 512.3,
    }
    assert sized(None).describe()["prefillTokensPerS"] is None


def test_the_rate_ignores_short_or_untimed_prefills():
    rate = PrefillRate()
    rate.observe(latency.MIN_SAMPLE_TOKENS - 1, 1.0)
    rate.observe(1000, 0.0)
    rate.observe(1000, -5.0)
    assert (rate.average, rate.settled, rate.samples) == (None, None, 0)
    assert rate.describe() == {"tokensPerS": None, "averageTokensPerS": None, "samples": 0}
    rate.observe(latency.MIN_SAMPLE_TOKENS, 100.0)
    assert rate.samples == 1 and rate.settled == pytest.approx(latency.MIN_SAMPLE_TOKENS * 10)


def test_the_settled_rate_moves_only_when_the_average_moves_far():
    rate = PrefillRate()
    rate.observe(100, 100.0)  # 1,000 tokens/s: the first sample settles at once
    assert rate.average == rate.settled == pytest.approx(1000)
    rate.observe(110, 100.0)  # 1,100: the average moves by 0.3 of the difference
    assert rate.average == pytest.approx(1030) and rate.settled == pytest.approx(1000)
    for _ in range(3):  # the same small jitter never moves the sizes
        rate.observe(120, 100.0)
        assert rate.settled == pytest.approx(1000)
    assert rate.average is not None and rate.average < 1000 * latency.SETTLE_RATIO
    rate.observe(400, 100.0)  # 4,000: the average leaves the band, the settled value follows
    assert rate.average > 1000 * latency.SETTLE_RATIO
    assert rate.settled == pytest.approx(rate.average)
    moved = rate.settled
    rate.observe(100, 100.0)  # back down a little: within the band of the new value
    assert rate.settled == moved and rate.samples == 7
    assert rate.describe() == {
        "tokensPerS": round(moved, 1),
        "averageTokensPerS": round(rate.average, 1),
        "samples": 7,
    }


def test_a_slower_machine_settles_lower_and_sizes_follow():
    rate = PrefillRate()
    rate.observe(1000, 1000.0)  # 1,000 tokens/s
    before = sized(rate.settled)
    for _ in range(10):
        rate.observe(100, 1000.0)  # 100 tokens/s, consistently
    assert rate.settled is not None and rate.settled < 1000 / latency.SETTLE_RATIO
    after = sized(rate.settled)
    assert after.prompt_tokens < before.prompt_tokens
    assert after.prefill_chunk <= before.prefill_chunk
