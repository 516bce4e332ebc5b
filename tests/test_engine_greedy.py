"""The engine's greedy decoding must match transformers' generate(do_sample=False) exactly."""

from __future__ import annotations

import random

import pytest
import torch
from tiny_models import STDLIB

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model

PROMPT_FILES = ("argparse.py", "json/decoder.py", "dataclasses.py", "functools.py")


def real_prompts(tokenizer, count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        text = (STDLIB / PROMPT_FILES[i % len(PROMPT_FILES)]).read_text()
        cut = rng.randrange(200, len(text))
        ids = tokenizer.encode(text[:cut])[-rng.randrange(8, 300) :]
        prompts.append(ids)
    return prompts


def hf_greedy(model, prompt: list[int], max_new: int, eos: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    new = out[0, len(prompt) :].tolist()
    return new[: new.index(eos)] if eos in new else new


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_matches_transformers_generate(tiny_model_dirs, arch):
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    eos = loaded.tokenizer.eos_token_id
    for prompt in real_prompts(loaded.tokenizer, 12, seed=hash(arch) % 100):
        rules = StopRules(max_new_tokens=24, stop_token_ids=frozenset({eos}))
        ours = greedy_generate(loaded.model, prompt, rules)
        assert ours.tokens == hf_greedy(loaded.model, prompt, 24, eos)
        assert ours.prompt_tokens == len(prompt)


def test_stop_rules(tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    prompt = real_prompts(loaded.tokenizer, 1)[0]
    free = greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=10))
    assert len(free.tokens) == 10 and free.stop_reason == "max_tokens"
    assert free.forward_passes == 10  # prefill + 9 decode steps; the 10th token needs no pass
    stop_at = free.tokens[3]
    eos = greedy_generate(
        loaded.model, prompt, StopRules(max_new_tokens=10, stop_token_ids=frozenset({stop_at}))
    )
    assert eos.tokens == free.tokens[: free.tokens.index(stop_at)] and eos.stop_reason == "eos"
    early = greedy_generate(
        loaded.model, prompt, StopRules(max_new_tokens=10, should_stop=lambda t: len(t) >= 4)
    )
    assert early.tokens == free.tokens[:4] and early.stop_reason == "stop"
    cancelled = greedy_generate(
        loaded.model, prompt, StopRules(max_new_tokens=10, cancelled=lambda: True)
    )
    assert cancelled.stop_reason == "cancelled" and len(cancelled.tokens) == 1


def test_allowed_tokens_constrains_the_first_token(tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    prompt = real_prompts(loaded.tokenizer, 1, seed=3)[0]
    forced = [5, 6, 7]
    out = greedy_generate(
        loaded.model,
        prompt,
        StopRules(max_new_tokens=3),
        allowed_tokens=lambda done: forced[len(done) : len(done) + 1] or None,
    )
    assert out.tokens == forced


def test_deterministic(tiny_model_dir):
    loaded = load_model(tiny_model_dir)
    prompt = real_prompts(loaded.tokenizer, 1, seed=5)[0]
    runs = [
        greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=16)).tokens for _ in range(3)
    ]
    assert runs[0] == runs[1] == runs[2]
