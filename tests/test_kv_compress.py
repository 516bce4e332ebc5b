"""SnapKV compression: exact attention scores, correct positions after dropping, lossless drafts."""

from __future__ import annotations

import random

import pytest
import torch
from tiny_models import STDLIB
from transformers import AutoModelForCausalLM, DynamicCache

from memosight_lsp.inference.compressed_decode import (
    CompressedDraftDecoder,
    SnapKVDecoder,
    feed,
    prefill_and_compress,
    snapkv_generate,
)
from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.kv_compress import (
    CompressedKV,
    QueryCapture,
    SnapKVConfig,
    gather_cache,
    kept_fraction,
    position_scores,
    select_positions,
    unsupported_reason,
    window_queries,
)
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.prefix_cache import PrefixCache, cache_bytes

FILES = ("argparse.py", "json/decoder.py", "dataclasses.py", "textwrap.py")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def sharpen(model, factor: float = 6.0) -> None:
    """Random tiny models mostly echo their input token; scaled attention makes context matter,
    so a compressed cache really changes the drafts (both accept and reject paths run)."""
    with torch.no_grad():
        for layer in getattr(getattr(model, "model", None), "layers", ()):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.self_attn, name).weight.mul_(factor)


def prompts(tokenizer, count: int, seed: int, low: int = 150, high: int = 600) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = (STDLIB / FILES[i % len(FILES)]).read_text()
        cut = rng.randrange(len(text) // 2, len(text))
        out.append(tokenizer.encode(text[:cut])[-rng.randrange(low, high) :])
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_scores_equal_the_models_own_attention(tiny_model_dirs, arch):
    """Captured + rotated window queries reproduce eager attention probabilities exactly."""
    folder = tiny_model_dirs[arch]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    loaded = load_model(folder, device="cpu")
    ids = prompts(loaded.tokenizer, 1, seed=3, low=200, high=201)[0]
    window = 16
    cache = DynamicCache(config=model.config)
    with torch.inference_mode(), QueryCapture(model, window) as capture:
        out = model(input_ids=torch.tensor([ids]), cache=cache, output_attentions=True)
    queries = window_queries(model, capture, len(ids))
    for layer, attentions in enumerate(out.attentions):
        want = attentions[0, :, -window:, :]  # [Hq, w, n]
        hkv = cache.layers[layer].keys.shape[1]
        want = want.reshape(hkv, -1, len(ids)).sum(dim=1)  # summed over the group's queries
        attn = model.model.layers[layer].self_attn
        got = position_scores(queries[layer], cache.layers[layer].keys[0], attn.scaling, 1)
        torch.testing.assert_close(got, want.float(), atol=1e-5, rtol=1e-4)


def test_select_keeps_sinks_recent_and_the_best():
    scores = torch.zeros(2, 100)
    scores[0, 40] = 5.0
    scores[1, 70] = 5.0
    kept = select_positions(scores, budget=10, sinks=2, recent=4)
    assert kept.shape == (2, 10)
    for head, best in ((0, 40), (1, 70)):
        row = kept[head].tolist()
        assert row == sorted(row) and len(set(row)) == 10
        assert {0, 1, 96, 97, 98, 99} <= set(row) and best in row


def test_recent_share_keeps_the_lines_above_the_cursor(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    ids = prompts(loaded.tokenizer, 1, seed=5, low=300, high=301)[0]
    budget = round(len(ids) / 4)
    for share, want in ((0.0, 16), (0.5, round(budget * 0.5))):
        config = SnapKVConfig(ratio=4.0, window=16, recent=16, min_keep=8, recent_share=share)
        assert config.recent_for(budget) == want
        _, _, compressed = prefill_and_compress(loaded.model, ids, config)
        tail = set(range(len(ids) - want, len(ids)))
        for layer in compressed.kept:
            for head in layer.tolist():
                assert len(head) == budget and tail <= set(head)


def test_unsupported_architectures_say_why(tiny_model_dirs):
    gpt2 = load_model(tiny_model_dirs["gpt2"], device="cpu").model
    llama = load_model(tiny_model_dirs["llama"], device="cpu").model
    assert unsupported_reason(llama) is None
    assert "gpt2" in unsupported_reason(gpt2)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_keep_everything_equals_greedy(tiny_model_dirs, arch):
    """Ratio 1 goes through capture, gather and explicit positions: output must not change."""
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    rules = StopRules(max_new_tokens=20)
    for prompt in prompts(loaded.tokenizer, 3, seed=1):
        want = greedy_generate(loaded.model, prompt, rules)
        got = snapkv_generate(loaded.model, prompt, rules, config=SnapKVConfig(ratio=1.0))
        assert got.tokens == want.tokens
        assert got.stats["kvBytes"] == got.stats["fullKvBytes"]


def test_positions_survive_dropping(tiny_model_dirs):
    """After dropping the middle, new tokens must be fed at their true rotary positions.

    A cache whose kept keys are all that attention can see behaves exactly like the full model
    with the dropped positions masked out: compare against an explicit 4D mask on the full cache.
    """
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    model = loaded.model
    ids = prompts(loaded.tokenizer, 1, seed=5, low=300, high=301)[0]
    config = SnapKVConfig(ratio=4.0, window=16, recent=16, min_keep=8)
    _, full, compressed = prefill_and_compress(model, ids, config)
    # Heads keep different positions; to compare with a mask, keep head 0's set everywhere.
    positions = compressed.kept[0][0].tolist()
    same = [torch.tensor(positions).expand(layer.keys.shape[1], -1) for layer in full.layers]
    small = gather_cache(full, same)
    token = ids[-1]
    got = feed(model, [token], small, len(ids))[-1]
    mask = torch.full((1, 1, 1, len(ids) + 1), torch.finfo(torch.float32).min)
    mask[..., positions] = 0.0
    mask[..., -1] = 0.0
    with torch.inference_mode():
        out = model(
            input_ids=torch.tensor([[token]]),
            position_ids=torch.tensor([[len(ids)]]),
            attention_mask=mask,
            cache=full,
        )
    torch.testing.assert_close(got, out.logits[0, -1].float(), atol=1e-4, rtol=1e-4)
    assert compressed.entries() == round(len(ids) / 4)
    assert cache_bytes(compressed.cache) * 3 < cache_bytes(full)


def test_lossy_mode_shrinks_memory_and_decodes(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["qwen2"], device="cpu")
    prompt = prompts(loaded.tokenizer, 1, seed=2, low=500, high=501)[0]
    got = snapkv_generate(
        loaded.model, prompt, StopRules(max_new_tokens=12), config=SnapKVConfig(ratio=4.0)
    )
    assert len(got.tokens) == 12
    assert got.stats["kvCompression"] == "lossy-snapkv"
    assert got.stats["keptPositions"] == 125
    assert got.stats["kvBytes"] * 3.5 < got.stats["fullKvBytes"]


def test_unequal_layer_budgets_decode(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    prompt = prompts(loaded.tokenizer, 1, seed=4, low=400, high=401)[0]
    config = SnapKVConfig(layer_budgets=(200, 80), min_keep=8)
    _, _, compressed = prefill_and_compress(loaded.model, prompt, config)
    assert [layer.keys.shape[-2] for layer in compressed.cache.layers] == [200, 80]
    assert not compressed.uniform
    got = snapkv_generate(loaded.model, prompt, StopRules(max_new_tokens=8), config=config)
    assert len(got.tokens) == 8


def test_kept_fraction_counts_slots():
    kept = [torch.tensor([[0, 1, 5], [0, 2, 5]]), torch.tensor([[0, 1, 2], [1, 2, 3]])]
    compressed = CompressedKV(cache=DynamicCache(), next_position=6, kept=kept)
    # position 1: layer0 1/2 heads, layer1 2/2 heads -> 0.75; position 5: 1.0, 0.0 -> 0.5
    assert kept_fraction(compressed, [1]) == pytest.approx(0.75)
    assert kept_fraction(compressed, [5]) == pytest.approx(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_lossless_draft_equals_greedy(tiny_model_dirs, arch, dtype):
    # bfloat16: one batched verification pass rounds unlike one-token steps unless both run
    # the same trunk (inference/fused_trunk.py); token for token equal there too.
    loaded = load_model(tiny_model_dirs[arch], device="cpu", dtype=dtype)
    eos = loaded.tokenizer.eos_token_id
    sharpen(loaded.model)
    decoder = CompressedDraftDecoder(config=SnapKVConfig(ratio=4.0, min_keep=16), draft_tokens=4)
    drafted = accepted = 0
    for i, prompt in enumerate(prompts(loaded.tokenizer, 8, seed=len(arch))):
        rules = StopRules(max_new_tokens=24, stop_token_ids=frozenset({eos}))
        want = greedy_generate(loaded.model, prompt, rules)
        got = decoder(loaded.model, prompt, rules, buffer_id=f"buf{i % 2}")
        assert got.tokens == want.tokens, f"prompt {i}"
        assert got.stop_reason == want.stop_reason
        drafted += got.stats["draftedTokens"]
        accepted += got.stats["acceptedDraftTokens"]
    if arch == "gpt2":
        assert drafted == 0  # not supported: plain decoding on the full cache
    else:
        assert 0 < accepted < drafted  # both the accept and the reject paths ran


def test_lossless_draft_reuses_the_full_prefix(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    cache = PrefixCache()
    decoder = CompressedDraftDecoder(prefix_cache=cache, config=SnapKVConfig(min_keep=16))
    prompt = prompts(loaded.tokenizer, 1, seed=9, low=300, high=301)[0]
    rules = StopRules(max_new_tokens=10)
    first = decoder(loaded.model, prompt, rules, buffer_id="a")
    longer = prompt + first.tokens[:3]
    second = decoder(loaded.model, longer, rules, buffer_id="a")
    assert second.stats["reusedPromptTokens"] == len(longer) - 1
    assert second.tokens == greedy_generate(loaded.model, longer, rules).tokens


def test_allowed_tokens_are_honoured(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    prompt = prompts(loaded.tokenizer, 1, seed=11)[0]
    rules = StopRules(max_new_tokens=10)

    def allowed(tokens):
        return [5, 6, 7] if len(tokens) < 2 else None

    want = greedy_generate(loaded.model, prompt, rules, allowed_tokens=allowed)
    got = CompressedDraftDecoder()(loaded.model, prompt, rules, allowed_tokens=allowed)
    assert got.tokens == want.tokens and want.tokens[0] in (5, 6, 7)


def test_compressed_prefixes_are_reused_at_the_right_positions(tiny_model_dirs):
    """Keep-everything through the reuse path must equal greedy; real ratios must stay small."""
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    model = loaded.model
    sharpen(model)
    prompt = prompts(loaded.tokenizer, 1, seed=13, low=400, high=401)[0]
    rules = StopRules(max_new_tokens=8)
    exact = SnapKVDecoder(config=SnapKVConfig(ratio=1.0), recompress_tail=16)
    lossy = SnapKVDecoder(config=SnapKVConfig(ratio=4.0, min_keep=16), recompress_tail=16)
    text = list(prompt)
    for step in range(4):
        want = greedy_generate(model, text, rules)
        got = exact(model, text, rules, buffer_id="a")
        assert got.tokens == want.tokens, f"step {step}"
        small = lossy(model, text, rules, buffer_id="b")
        if step:
            assert got.stats["reusedPromptTokens"] == small.stats["reusedPromptTokens"] > 300
        assert small.stats["keptPositions"] < len(text) * 0.4
        text = text + want.tokens[:3] + text[100:110]  # typing: accept 3 tokens, paste 10
    # An edit inside the compressed region starts over instead of reusing a wrong cache.
    edited = [*text[:50], 7, *text[51:]]
    assert lossy(model, edited, rules, buffer_id="b").stats["reusedPromptTokens"] == 0


def test_lossless_draft_prefills_in_cancellable_chunks(tiny_model_dirs):
    loaded = load_model(tiny_model_dirs["llama"], device="cpu")
    decoder = CompressedDraftDecoder(prefix_cache=PrefixCache(), config=SnapKVConfig(min_keep=16))
    prompt = prompts(loaded.tokenizer, 1, seed=12, low=300, high=301)[0]
    passes: list[int] = []
    rules = StopRules(
        max_new_tokens=10,
        prefill_chunk=64,
        progress=lambda tokens: passes.append(len(tokens)),
        cancelled=lambda: len(passes) >= 2,
    )
    got = decoder(loaded.model, prompt, rules, buffer_id="a")
    assert got.stop_reason == "cancelled" and got.tokens == []
    assert got.cancelled_at_prompt_tokens == 128
    # The prefix prefilled so far is kept: the next call of the buffer starts from it.
    again = decoder(loaded.model, prompt, StopRules(max_new_tokens=10), buffer_id="a")
    assert again.stats["reusedPromptTokens"] == 128
    assert (
        again.tokens == greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=10)).tokens
    )
