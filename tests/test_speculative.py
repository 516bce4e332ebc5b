"""Speculative decoding must be token-for-token identical to the engine's plain greedy decoding."""

from __future__ import annotations

import random

import pytest
import torch
from test_engine_greedy import hf_greedy
from tiny_models import STDLIB, tiny_causal_lm, tiny_tokenizer
from transformers import AutoModelForCausalLM

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.drafters import (
    CostModel,
    DraftCandidate,
    HiddenStateDrafter,
    PreviousSuggestion,
)
from memosight_lsp.inference.fused_trunk import FusedTrunk, HFTrunk, prepare_trunk
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.heads import PredictionHeads
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder, default_sources

FILES = ("argparse.py", "json/decoder.py", "dataclasses.py", "functools.py", "textwrap.py")
# A verification pass of up to 16 tokens costs about one step: drafts are never pruned by cost.
FLAT_COST = CostModel({1: 1.0, 16: 1.0, 32: 2.0})


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def prompts_from_files(tokenizer, count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        text = (STDLIB / FILES[i % len(FILES)]).read_text()
        cut = rng.randrange(100, len(text))
        out.append(tokenizer.encode(text[:cut])[-rng.randrange(4, 500) :])
    return out


class OracleDrafter(HiddenStateDrafter):
    """Proposes a wrong branch first and the true continuation second, as a branching tree.

    Exercises the 4D tree mask, position ids by depth and the KV gather of a non-first branch.
    """

    def __init__(self) -> None:
        self.truth: list[int] = []
        self.done = 0
        self.calls = 0

    def candidates(self, hidden: torch.Tensor, limit: int) -> list[DraftCandidate]:
        self.calls += 1
        rest = self.truth[self.done : self.done + min(limit, 6)]
        if not rest:
            return []
        wrong = [(rest[0] + 1) % 50 + 3, *rest[1:]]
        half = [rest[0], (rest[1] + 7) % 50 + 3] if len(rest) > 1 else []
        cands = [DraftCandidate(tokens=wrong, probs=[0.9] * len(wrong), source="heads")]
        if half:
            cands.append(DraftCandidate(tokens=half, probs=[0.8, 0.8], source="heads"))
        cands.append(DraftCandidate(tokens=rest, probs=[0.7] * len(rest), source="heads"))
        return cands


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_lossless_over_real_prompts(tiny_model_dirs, arch):
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    eos = loaded.tokenizer.eos_token_id
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    accepted = 0
    for i, prompt in enumerate(prompts_from_files(loaded.tokenizer, 60, seed=len(arch))):
        rules = StopRules(max_new_tokens=40, stop_token_ids=frozenset({eos}))
        want = greedy_generate(loaded.model, prompt, rules)
        got = decoder(loaded.model, prompt, rules, buffer_id=f"buf{i % 3}")
        assert got.tokens == want.tokens, f"prompt {i}"
        assert got.stop_reason == want.stop_reason
        accepted += got.stats["acceptedDraftTokens"]
    assert accepted > 0  # the drafts were really used, not just plain steps


def test_branching_tree_is_verified_exactly(tiny_model_dirs):
    for arch in ("llama", "gpt2"):
        loaded = load_model(tiny_model_dirs[arch], device="cpu")
        oracle = OracleDrafter()
        decoder = SpeculativeDecoder(
            sources=[PredictionHeads(oracle)], cost_model=FLAT_COST, calibrate=False
        )
        for prompt in prompts_from_files(loaded.tokenizer, 6, seed=11):
            rules = StopRules(max_new_tokens=30)
            want = greedy_generate(loaded.model, prompt, rules)
            oracle.truth = want.tokens
            # done = tokens committed before the drafts: track through should_stop.
            track = StopRules(max_new_tokens=30, should_stop=lambda t, o=oracle: _track(o, t))
            oracle.done = 0
            got = decoder(loaded.model, prompt, track)
            assert got.tokens == want.tokens
            # Right branch is second: every pass accepts several tokens through a gathered path.
            assert got.forward_passes < want.forward_passes / 2
            assert got.stats["acceptedBySource"]["heads"] > 15


def _track(oracle: OracleDrafter, tokens) -> bool:
    oracle.done = len(tokens)
    return False


def test_eager_attention_uses_an_additive_mask(tiny_model_dirs):
    # GPT-2 runs transformers' own forward (Llama-family models run FusedTrunk, always SDPA).
    folder = tiny_model_dirs["gpt2"]
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager")
    model.eval()
    trunk = prepare_trunk(model)
    assert isinstance(trunk, HFTrunk) and trunk.additive_mask
    loaded = load_model(folder, device="cpu")
    oracle = OracleDrafter()
    decoder = SpeculativeDecoder(sources=[PredictionHeads(oracle)], cost_model=FLAT_COST)
    for prompt in prompts_from_files(loaded.tokenizer, 4, seed=5):
        want = greedy_generate(model, prompt, StopRules(max_new_tokens=20))
        oracle.truth, oracle.done = want.tokens, 0
        got = decoder(
            model,
            prompt,
            StopRules(max_new_tokens=20, should_stop=lambda t, o=oracle: _track(o, t)),
        )
        assert got.tokens == want.tokens
        assert got.forward_passes < want.forward_passes


def test_matches_transformers_generate(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    eos = loaded.tokenizer.eos_token_id
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    for prompt in prompts_from_files(loaded.tokenizer, 8, seed=2):
        got = decoder(loaded.model, prompt, StopRules(max_new_tokens=24, stop_token_ids={eos}))
        assert got.tokens == hf_greedy(loaded.model, prompt, 24, eos)


def test_stop_rules_apply_token_by_token(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    for prompt in prompts_from_files(loaded.tokenizer, 6, seed=9):
        free = greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=30))
        cases = [
            StopRules(max_new_tokens=7),
            StopRules(max_new_tokens=30, stop_token_ids=frozenset({free.tokens[5]})),
            StopRules(max_new_tokens=30, should_stop=lambda t: len(t) >= 11),
            StopRules(max_new_tokens=30, should_stop=lambda t, s=free.tokens[9]: t[-1] == s),
        ]
        for rules in cases:
            want = greedy_generate(loaded.model, prompt, rules)
            got = decoder(loaded.model, prompt, rules, buffer_id="a")
            assert (got.tokens, got.stop_reason) == (want.tokens, want.stop_reason)
    cancelled = decoder(loaded.model, prompt, StopRules(max_new_tokens=10, cancelled=lambda: True))
    assert cancelled.stop_reason == "cancelled" and len(cancelled.tokens) == 1


def test_allowed_tokens_constrain_like_greedy(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    prompt = prompts_from_files(loaded.tokenizer, 1, seed=4)[0]
    free = greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=12)).tokens
    # Forbid the model's own first choices: the rest must follow the constrained path.
    forced = [t for t in range(3, 40) if t != free[0]][:2]

    def allowed(done):
        return forced[len(done) : len(done) + 1] or None

    want = greedy_generate(
        loaded.model, prompt, StopRules(max_new_tokens=12), allowed_tokens=allowed
    )
    got = decoder(loaded.model, prompt, StopRules(max_new_tokens=12), allowed_tokens=allowed)
    assert got.tokens == want.tokens and got.tokens[:2] == forced


def test_previous_suggestion_is_drafted_again(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    decoder = SpeculativeDecoder(cost_model=FLAT_COST, sources=[PreviousSuggestion()])
    prompt = prompts_from_files(loaded.tokenizer, 1, seed=8)[0]
    rules = StopRules(max_new_tokens=24)
    first = decoder(loaded.model, prompt, rules, buffer_id="doc")
    again = decoder(loaded.model, prompt, rules, buffer_id="doc")
    assert again.tokens == first.tokens
    assert again.stats["acceptedBySource"].get("previous", 0) >= 15
    assert again.forward_passes <= 5


def test_sliding_window_models_fall_back_to_greedy(tmp_path):
    from tiny_models import tiny_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=0,
    )
    model = Qwen2ForCausalLM(config).eval()
    decoder = SpeculativeDecoder(cost_model=FLAT_COST)
    prompt = tok.encode((STDLIB / "glob.py").read_text()[:600])
    rules = StopRules(max_new_tokens=20)
    got = decoder(model, prompt, rules, buffer_id="x")
    assert got.tokens == greedy_generate(model, prompt, rules).tokens
    assert "speculative" not in got.stats


@pytest.mark.parametrize("arch", ["qwen3", "mistral"])
def test_fused_trunk_architectures_stay_lossless(arch):
    """Qwen3 (q/k norms) and Mistral (grouped KV heads) through FusedTrunk: trees and n-grams
    give greedy's tokens, and greedy gives transformers generate's."""
    tokenizer = tiny_tokenizer()
    model = tiny_causal_lm(arch, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert isinstance(prepare_trunk(model), FusedTrunk)
    eos = tokenizer.eos_token_id
    oracle = OracleDrafter()
    trees = SpeculativeDecoder(sources=[PredictionHeads(oracle)], cost_model=FLAT_COST)
    ngrams = SpeculativeDecoder(sources=default_sources(heads=None), cost_model=FLAT_COST)
    for prompt in prompts_from_files(tokenizer, 8, seed=3):
        want = greedy_generate(model, prompt, StopRules(max_new_tokens=20))
        oracle.truth, oracle.done = want.tokens, 0
        track = StopRules(max_new_tokens=20, should_stop=lambda t, o=oracle: _track(o, t))
        drafted = trees(model, prompt, track)
        assert drafted.tokens == want.tokens
        assert drafted.forward_passes < want.forward_passes  # the trees were really accepted
        assert ngrams(model, prompt, StopRules(max_new_tokens=20)).tokens == want.tokens
        stopping = StopRules(max_new_tokens=12, stop_token_ids=frozenset({eos}))
        assert greedy_generate(model, prompt, stopping).tokens == hf_greedy(model, prompt, 12, eos)
