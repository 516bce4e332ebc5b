"""Per-buffer KV reuse: same output as a cold decode, only the changed tail is prefilled."""

from __future__ import annotations

import pytest
from tiny_models import STDLIB
from transformers import DynamicCache

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.drafters import CostModel
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.prefix_cache import PrefixCache, cache_bytes, common_prefix
from memosight_lsp.inference.speculative import ModelRunner, SpeculativeDecoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_common_prefix():
    a = list(range(1000))
    assert common_prefix(a, a) == 1000
    assert common_prefix(a, [*a[:700], 5]) == 700
    assert common_prefix([], a) == 0
    assert common_prefix([1, 2, 3], [1, 9]) == 1


def test_edits_reuse_the_prefix_and_keep_output_identical(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    tok = loaded.tokenizer
    decoder = SpeculativeDecoder(cost_model=CostModel())
    text = (STDLIB / "argparse.py").read_text()[:6000]
    rules = StopRules(max_new_tokens=16)
    # Type a line character by character: each keystroke may re-tokenize the last token.
    typed = "        result = self._get_values(action, arg_strings)"
    previous_len = None
    for end in range(8, len(typed), 5):
        prompt = tok.encode(text + "\n" + typed[:end])
        got = decoder(loaded.model, prompt, rules, buffer_id="file:///a.py")
        want = greedy_generate(loaded.model, prompt, rules)
        assert got.tokens == want.tokens
        reused = got.stats["reusedPromptTokens"]
        if previous_len is not None:
            assert reused >= previous_len - 3  # only the last token or two are recomputed
            assert reused < len(prompt)
        previous_len = len(prompt)
    stats = decoder.prefix_cache.stats()
    assert stats["hits"] >= 8 and stats["buffers"] == 1 and stats["bytes"] > 0


def test_other_buffers_and_models_do_not_share(tiny_model_dirs):
    llama = load_model(tiny_model_dirs["llama"], device="cpu")
    qwen = load_model(tiny_model_dirs["qwen2"], device="cpu")
    prompt = llama.tokenizer.encode((STDLIB / "glob.py").read_text()[:2000])
    cache = PrefixCache()
    runner = ModelRunner(llama.model)
    kv = DynamicCache(config=llama.model.config)
    runner.prefill(prompt, kv)
    cache.put("a", llama.model, prompt, kv)
    assert cache.take("b", llama.model, prompt)[1] == 0  # another buffer
    got, reused = cache.take("a", qwen.model, prompt)  # another model
    assert reused == 0 and got.get_seq_length() == 0
    cache.put("a", llama.model, prompt, kv)
    got, reused = cache.take("a", llama.model, prompt)
    assert reused == len(prompt) - 1  # the last token is always recomputed for its logits
    assert got.get_seq_length() == reused
    assert "a" not in cache  # taken out while in use


def test_lru_evicts_to_the_byte_budget(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    runner = ModelRunner(loaded.model)
    ids = loaded.tokenizer.encode((STDLIB / "glob.py").read_text()[:3000])
    one = DynamicCache(config=loaded.model.config)
    runner.prefill(ids, one)
    size = cache_bytes(one)
    assert size == 2 * 2 * len(ids) * 2 * 16 * 4  # layers * (k,v) * tokens * kv_heads * dim * fp32
    cache = PrefixCache(budget_bytes=int(size * 2.5))
    for name in ("a", "b", "c"):
        kv = DynamicCache(config=loaded.model.config)
        runner.prefill(ids, kv)
        cache.put(name, loaded.model, ids, kv)
    assert "a" not in cache and "b" in cache and "c" in cache
    assert cache.memory_bytes() == 2 * size <= cache.budget_bytes
    assert cache.stats()["evictions"] == 1
    cache.forget("b")
    assert len(cache) == 1


def test_an_attachment_lives_and_goes_with_its_cache():
    from transformers import LlamaConfig

    from memosight_lsp.inference.kv_cache import cache_for_config

    config = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = object()
    store = PrefixCache(max_buffers=1)
    store.put("a", model, [1, 2], cache_for_config(config), attachment="a's suggestion")
    assert store.attachment("a", model) == "a's suggestion"
    assert store.attachment("a", object()) is None  # another model's entry is not ours
    store.put("b", model, [1, 2], cache_for_config(config), attachment="b's")
    assert store.attachment("a", model) is None  # evicted with a's cache
    store.forget("b")
    assert store.attachment("b", model) is None
