"""The project's KV cache behaves like transformers' DynamicCache (GrowingLayer without copying
the cache every step), and transformers' forward runs on it."""

from __future__ import annotations

import torch
from test_engine_greedy import hf_greedy
from transformers import AutoModelForCausalLM, DynamicCache
from transformers.cache_utils import DynamicLayer

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.kv_cache import (
    GrowingLayer,
    KVCache,
    Layer,
    for_transformers,
    new_cache,
    plain_layer,
)
from memosight_lsp.inference.loading import load_model


def states(n: int, seed: int) -> torch.Tensor:
    return torch.randn(1, 2, n, 4, generator=torch.Generator().manual_seed(seed))


def test_updates_crops_and_outside_assignments_match_dynamic_layer() -> None:
    grow, plain = GrowingLayer(), DynamicLayer()
    steps = [("update", 5), ("update", 1), ("crop", 2), ("update", 3), ("update", 300)]
    for i, (op, n) in enumerate(steps):
        if op == "crop":
            grow.crop(-n)
            plain.crop(-n)
        else:
            for layer in (grow, plain):
                layer.update(states(n, i), states(n, 100 + i))
        assert torch.equal(grow.keys, plain.keys) and torch.equal(grow.values, plain.values)
    # Small steps write into the same storage; no copy of what is cached.
    buffer = grow.keys.data_ptr()
    grow.update(states(1, 7), states(1, 8))
    assert grow.keys.data_ptr() == buffer and grow.keys.shape[-2] == 308
    # A tensor assigned from outside (a compressed cache) is adopted, then grown in place.
    grow.keys, grow.values = states(10, 9), states(10, 10)
    grow.update(states(1, 11), states(1, 12))
    assert torch.equal(grow.keys[..., :10, :], states(10, 9))
    assert torch.equal(grow.keys[..., 10:, :], states(1, 11)) and grow.keys.shape[-2] == 11


def test_decoding_on_growing_caches_matches_transformers(tiny_model_dirs) -> None:
    """greedy_generate (growing layers) against generate (transformers' own cache)."""
    for arch in ("llama", "qwen2"):
        loaded = load_model(tiny_model_dirs[arch], device="cpu")
        cache = new_cache(loaded.model)
        assert isinstance(cache, KVCache)
        assert all(type(layer) is GrowingLayer for layer in cache.layers)
        eos = loaded.tokenizer.eos_token_id
        text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n" * 40
        prompt = loaded.tokenizer.encode(text)
        rules = StopRules(max_new_tokens=40, stop_token_ids=frozenset({eos}))
        got = greedy_generate(loaded.model, prompt, rules)
        assert got.tokens == hf_greedy(loaded.model, prompt, 40, eos)


def test_the_cache_updates_crops_and_resets_as_dynamic_cache() -> None:
    for layer_type in (Layer, GrowingLayer):
        ours, theirs = KVCache([layer_type() for _ in range(2)]), DynamicCache()
        assert ours.get_seq_length() == theirs.get_seq_length() == 0
        for i, (op, n) in enumerate([("update", 7), ("crop", 3), ("update", 1), ("crop", 0)]):
            for cache in (ours, theirs):
                if op == "crop":
                    cache.crop(-n)
                else:
                    for index in range(2):
                        cache.update(states(n, i + index), states(n, 50 + i + index), index)
            assert ours.get_seq_length() == theirs.get_seq_length()
            for mine, other in zip(ours.layers, theirs.layers, strict=True):
                assert torch.equal(mine.keys, other.keys)
                assert torch.equal(mine.values, other.values)
        ours.reset()
        assert ours.get_seq_length() == 0 and all(not layer.is_initialized for layer in ours.layers)


def test_transformers_forward_fills_the_same_layers(tiny_model_dirs) -> None:
    """for_transformers: transformers' forward on a KVCache appends to its very layers, and
    gives the logits it gives on its own DynamicCache."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dirs["llama"]).eval()
    ids = torch.randint(0, 200, (1, 12), generator=torch.Generator().manual_seed(0))
    ours, theirs = new_cache(model), DynamicCache(config=model.config)
    with torch.inference_mode():
        for part in (ids[:, :9], ids[:, 9:]):
            got = model(input_ids=part, cache=for_transformers(ours), use_cache=True).logits
            want = model(input_ids=part, cache=theirs, use_cache=True).logits
            assert torch.equal(got, want)
    assert isinstance(ours, KVCache) and ours.get_seq_length() == 12
    assert torch.equal(ours.layers[1].keys, theirs.layers[1].keys)
    assert all(plain_layer(layer) for layer in [*ours.layers, *theirs.layers])
