"""The compression policy: each stage only where its thresholds say it pays, with reasons."""

from __future__ import annotations

from memosight_lsp.inference.compression_policy import Thresholds, plan
from memosight_lsp.inference.loading import load_model


def test_short_prompts_and_off_mean_no_kv_compression():
    assert plan(requested_kv="off", prompt_tokens=9000, budget_tokens=1024).kv_mode == "off"
    short = plan(requested_kv="lossy-snapkv", prompt_tokens=500, budget_tokens=1024)
    assert short.kv_mode == "off" and "500 < 2048" in short.reasons[0]


def test_long_prompts_get_the_requested_mode(tiny_model_dirs):
    llama = load_model(tiny_model_dirs["llama"], device="cpu").model
    gpt2 = load_model(tiny_model_dirs["gpt2"], device="cpu").model
    got = plan(requested_kv="lossy-snapkv", prompt_tokens=4000, budget_tokens=4096, model=llama)
    assert got.kv_mode == "lossy-snapkv" and got.kv_config.ratio == 4.0
    # Measured slower on CPU: refused there unless the thresholds allow it.
    cpu = plan(requested_kv="lossless-draft", prompt_tokens=4000, budget_tokens=4096, model=llama)
    assert cpu.kv_mode == "off" and "CPU" in cpu.reasons[0]
    allowed = plan(
        requested_kv="lossless-draft",
        prompt_tokens=4000,
        budget_tokens=4096,
        model=llama,
        thresholds=Thresholds(lossless_on_cpu=True),
    )
    assert allowed.kv_mode == "lossless-draft"
    refused = plan(requested_kv="lossy-snapkv", prompt_tokens=4000, budget_tokens=4096, model=gpt2)
    assert refused.kv_mode == "off" and "gpt2" in refused.reasons[0]


def test_chunk_scoring_needs_a_big_budget_and_real_overflow():
    small = plan(requested_kv="off", prompt_tokens=0, budget_tokens=1024, candidate_tokens=9000)
    assert not small.chunk_scoring and small.recursive
    tight = plan(
        requested_kv="off", prompt_tokens=0, budget_tokens=4096, candidate_tokens=5000, candidates=9
    )
    assert not tight.chunk_scoring
    big = plan(
        requested_kv="off", prompt_tokens=0, budget_tokens=4096, candidate_tokens=9000, candidates=9
    )
    assert big.chunk_scoring and big.recursive
    many = plan(
        requested_kv="off",
        prompt_tokens=0,
        budget_tokens=4096,
        candidate_tokens=9000,
        candidates=100,
        thresholds=Thresholds(chunk_max_candidates=32),
    )
    assert not many.chunk_scoring
    assert set(big.describe()) == {"kvMode", "kvRatio", "chunkScoring", "recursive", "reasons"}
