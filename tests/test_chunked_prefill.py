"""Prefill in chunks (StopRules.prefill_chunk): the same logits and tokens as one pass, a
cancellation between chunks that keeps what was prefilled, and prefill_only (pre-warm) whose
cache the buffer's next call reuses. Tiny real models through the real loading code."""

from __future__ import annotations

import random

import pytest
import torch
from tiny_models import STDLIB

from memosight_lsp.inference.decoder import MAX_PREFILL_ROWS, Decoder, Run, StopRules
from memosight_lsp.inference.drafters import CostModel
from memosight_lsp.inference.fused_trunk import prepare_trunk
from memosight_lsp.inference.greedy import GreedyDecoder, forward
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.prefix_cache import PrefixCache
from memosight_lsp.inference.speculative import ModelRunner, SpeculativeDecoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FILES = ("argparse.py", "json/decoder.py", "dataclasses.py", "textwrap.py")
FLAT_COST = CostModel({1: 1.0, 16: 1.0, 32: 2.0})
CHUNK = 64
PROMPT_TOKENS = 300  # chunks end at 64, 128, 192, 256 (polled), then 300 in the last pass


def prompts(tokenizer, count: int, seed: int, length: int = PROMPT_TOKENS) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = (STDLIB / FILES[i % len(FILES)]).read_text()
        cut = rng.randrange(length * 8, len(text))
        ids = tokenizer.encode(text[:cut])[-length:]
        assert len(ids) == length
        out.append(ids)
    return out


def decoders() -> dict[str, Decoder]:
    return {"greedy": GreedyDecoder(), "speculative": SpeculativeDecoder(cost_model=FLAT_COST)}


def rules(**extra) -> StopRules:
    return StopRules(max_new_tokens=16, **extra)


class CancelAfter:
    """`cancelled` that turns true on its n-th poll, counting the polls."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.polls = 0

    def __call__(self) -> bool:
        self.polls += 1
        return self.polls >= self.n


def prefill_logits(model, ids: list[int], chunk: int, *, speculative: bool) -> torch.Tensor:
    """The last prompt position's logits [V] through Run.prefill, as each decoder steps it."""
    run = Run(
        model, ids, StopRules(max_new_tokens=1, prefill_chunk=chunk), None, None, PrefixCache()
    )
    cache = run.new_cache()
    if speculative:
        runner = ModelRunner(model)
        out = run.prefill(lambda part: runner.prefill(part, cache), cache, 0)
        assert out is not None
        return out[1]
    trunk = prepare_trunk(model)

    def step(part):
        return forward(trunk, torch.tensor([list(part)]), cache, last_only=True, prefill=True)[-1]

    logits = run.prefill(step, cache, 0)
    assert logits is not None and cache.get_seq_length() == len(ids)
    return logits


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("speculative", [False, True])
def test_chunked_prefill_gives_the_one_pass_logits(tiny_model_dirs, arch, speculative):
    model = load_model(tiny_model_dirs[arch], device="cpu").model
    tokenizer = load_model(tiny_model_dirs[arch], device="cpu").tokenizer
    for ids in prompts(tokenizer, 3, seed=len(arch)):
        whole = prefill_logits(model, ids, 0, speculative=speculative)
        with torch.inference_mode():
            reference = model(torch.tensor([ids])).logits[0, -1]  # [V]
        torch.testing.assert_close(whole, reference, atol=1e-4, rtol=1e-4)
        for chunk in (CHUNK, 100, 7):
            chunked = prefill_logits(model, ids, chunk, speculative=speculative)
            torch.testing.assert_close(chunked, whole, atol=1e-4, rtol=1e-4)
            assert int(chunked.argmax()) == int(whole.argmax())


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_chunked_prefill_decodes_the_same_tokens(tiny_model_dirs, arch):
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    for name, decoder in decoders().items():
        for i, ids in enumerate(prompts(loaded.tokenizer, 4, seed=7)):
            whole = decoder(loaded.model, ids, rules())
            reports: list[int] = []
            chunked = decoder(
                loaded.model,
                ids,
                rules(prefill_chunk=CHUNK, progress=lambda t, r=reports: r.append(len(t))),
            )
            assert chunked.tokens == whole.tokens, (name, i)
            assert chunked.stop_reason == whole.stop_reason == "max_tokens"
            # Progress after each polled chunk (no tokens yet), then after decoded tokens.
            assert reports[:4] == [0, 0, 0, 0] and reports[4] == 1


@pytest.mark.parametrize(
    ("length", "sizes"), [(300, [64, 64, 64, 64, 44]), (270, [64, 64, 64, 78])]
)
def test_a_short_remainder_joins_the_last_chunk(tiny_model_dir, length, sizes):
    """Under a chunk and a quarter left: one last pass, not a tiny one after a full one."""
    loaded = load_model(tiny_model_dir, device="cpu")
    ids = prompts(loaded.tokenizer, 1, seed=1, length=length)[0]
    passes: list[int] = []
    cancel = CancelAfter(10**9)
    run = Run(
        loaded.model, ids, rules(prefill_chunk=CHUNK, cancelled=cancel), None, None, PrefixCache()
    )
    cache = run.new_cache()
    runner = ModelRunner(loaded.model)

    def step(part):
        passes.append(len(part))
        return runner.prefill(part, cache)

    assert run.prefill(step, cache, 0) is not None
    assert passes == sizes and cancel.polls == len(sizes) - 1
    assert cache.get_seq_length() == length and run.result.forward_passes == 1


@pytest.mark.parametrize("asked", [0, 2000])
def test_a_long_prompt_is_prefilled_in_bounded_passes(tiny_model_dir, asked):
    """However large the chunk asked for (none: the whole prompt), a pass takes at most
    MAX_PREFILL_ROWS tokens: attention's scores per pass stay bounded."""
    loaded = load_model(tiny_model_dir, device="cpu")
    ids = list(range(5, 5 + 2 * MAX_PREFILL_ROWS + 176))
    run = Run(loaded.model, ids, rules(prefill_chunk=asked), None, None, PrefixCache())
    cache = run.new_cache()
    passes: list[int] = []
    assert run.prefill(lambda part: passes.append(len(part)) or part, cache, 0) is not None
    assert passes == [MAX_PREFILL_ROWS, MAX_PREFILL_ROWS, 176]


@pytest.mark.parametrize("name", ["greedy", "speculative"])
def test_a_cancellation_between_chunks_stops_the_prefill(tiny_model_dir, name):
    loaded = load_model(tiny_model_dir, device="cpu")
    decoder = decoders()[name]
    ids = prompts(loaded.tokenizer, 1, seed=3)[0]
    cancel = CancelAfter(2)
    got = decoder(loaded.model, ids, rules(prefill_chunk=CHUNK, cancelled=cancel), buffer_id="doc")
    assert got.stop_reason == "cancelled" and got.tokens == []
    assert cancel.polls == 2  # polled after each chunk: it stopped after the second
    assert got.forward_passes == 0 and got.prefill_ms > 0
    kept = "doc" in decoder.prefix_cache
    assert kept == (name == "speculative")  # greedy keeps nothing between calls


def test_what_a_cancelled_prefill_did_is_reused_by_the_next_call(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    for ids in prompts(loaded.tokenizer, 3, seed=5):
        decoder = SpeculativeDecoder(cost_model=FLAT_COST)
        want = SpeculativeDecoder(cost_model=FLAT_COST)(loaded.model, ids, rules())
        cancelled = decoder(
            loaded.model, ids, rules(prefill_chunk=CHUNK, cancelled=CancelAfter(2)), buffer_id="b"
        )
        assert cancelled.stop_reason == "cancelled"
        assert cancelled.stats["reusedPromptTokens"] == 0
        # The next call (a keystroke: one more token) starts from the 128 prefilled tokens.
        again = decoder(loaded.model, ids, rules(prefill_chunk=CHUNK), buffer_id="b")
        assert again.stats["reusedPromptTokens"] == 2 * CHUNK
        assert again.tokens == want.tokens and again.stop_reason == want.stop_reason
        # Cancelled again, later: it goes on from there and keeps more.
        longer = [*ids, *ids[:150]]  # 150 more: a chunk, then polled
        third = decoder(
            loaded.model,
            longer,
            rules(prefill_chunk=CHUNK, cancelled=CancelAfter(1)),
            buffer_id="b",
        )
        assert third.stop_reason == "cancelled"
        reused = third.stats["reusedPromptTokens"]
        assert reused >= len(ids)  # the last call's prompt and suggestion were kept
        fourth = decoder(loaded.model, longer, rules(), buffer_id="b")
        assert fourth.stats["reusedPromptTokens"] == reused + CHUNK
        fresh = SpeculativeDecoder(cost_model=FLAT_COST)(loaded.model, longer, rules())
        assert fourth.tokens == fresh.tokens


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_prefill_only_is_reused_and_changes_nothing(tiny_model_dirs, arch):
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    model = loaded.model
    for i, ids in enumerate(prompts(loaded.tokenizer, 3, seed=11)):
        want = SpeculativeDecoder(cost_model=FLAT_COST)(model, ids, rules())
        decoder = SpeculativeDecoder(cost_model=FLAT_COST)
        warm = decoder.prefill_only(
            model, ids, StopRules(max_new_tokens=0, prefill_chunk=CHUNK), buffer_id="b"
        )
        assert warm.stop_reason != "cancelled" and warm.tokens == []
        assert warm.stats["reusedPromptTokens"] == 0 and warm.forward_passes == 1
        assert "b" in decoder.prefix_cache
        got = decoder(model, ids, rules(), buffer_id="b")
        assert got.stats["reusedPromptTokens"] == len(ids) - 1
        assert got.tokens == want.tokens, i
        # A prompt that goes on from the pre-warmed one reuses all of it.
        other = SpeculativeDecoder(cost_model=FLAT_COST)
        other.prefill_only(model, ids[:-30], StopRules(max_new_tokens=0), buffer_id="b")
        grown = other(model, ids, rules(), buffer_id="b")
        assert grown.stats["reusedPromptTokens"] == len(ids) - 30
        assert grown.tokens == want.tokens


def test_a_cancelled_prefill_only_keeps_its_part_and_the_next_goes_on(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    ids = prompts(loaded.tokenizer, 1, seed=13)[0]
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    part = decoder.prefill_only(
        loaded.model,
        ids,
        StopRules(max_new_tokens=0, prefill_chunk=CHUNK, cancelled=CancelAfter(3)),
        buffer_id="b",
    )
    assert part.stop_reason == "cancelled"
    rest = decoder.prefill_only(
        loaded.model, ids, StopRules(max_new_tokens=0, prefill_chunk=CHUNK), buffer_id="b"
    )
    assert rest.stop_reason != "cancelled" and rest.stats["reusedPromptTokens"] == 3 * CHUNK
    got = decoder(loaded.model, ids, rules(), buffer_id="b")
    want = GreedyDecoder()(loaded.model, ids, rules())
    assert got.stats["reusedPromptTokens"] == len(ids) - 1 and got.tokens == want.tokens


def test_decoders_that_reuse_nothing_prefill_nothing_ahead(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    ids = prompts(loaded.tokenizer, 1, seed=2)[0]
    greedy = GreedyDecoder()
    warm = greedy.prefill_only(loaded.model, ids, StopRules(max_new_tokens=0), buffer_id="b")
    assert warm.forward_passes == 0 and warm.prefill_ms == 0 and len(greedy.prefix_cache) == 0
