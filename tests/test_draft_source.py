"""A draft source is one class: written here in a few lines, plugged in beside the built-in ones,
its tokens accepted when right and the output still greedy's when wrong."""

from __future__ import annotations

import pytest
from test_speculative import FLAT_COST, prompts_from_files

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.drafters import DraftCandidate, DraftSource, DraftState
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder, default_sources

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class FixedTokens(DraftSource):
    """Proposes the rest of a fixed token string after the tokens generated so far."""

    name = "fixed"

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def candidates(self, state: DraftState, room: int) -> list[DraftCandidate]:
        rest = self.tokens[len(state.committed) - state.prompt_len :][:room]
        probs = [0.9 ** (i + 1) for i in range(len(rest))]
        return [DraftCandidate(tokens=rest, probs=probs, source=self.name)] if rest else []


def test_a_new_source_is_accepted_when_right(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    for prompt in prompts_from_files(loaded.tokenizer, 4, seed=21):
        rules = StopRules(max_new_tokens=24)
        want = greedy_generate(loaded.model, prompt, rules)
        fixed = FixedTokens(want.tokens)
        decoder = SpeculativeDecoder(sources=[fixed], cost_model=FLAT_COST)
        got = decoder(loaded.model, prompt, rules)
        assert got.tokens == want.tokens
        # All but the first token (the prefill's) and each pass's bonus come from the source.
        assert got.stats["acceptedBySource"]["fixed"] >= len(want.tokens) - got.forward_passes
        assert got.forward_passes < want.forward_passes / 2


def test_a_wrong_source_leaves_greedy_output(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    vocab = int(loaded.model.config.vocab_size)
    for prompt in prompts_from_files(loaded.tokenizer, 4, seed=22):
        rules = StopRules(max_new_tokens=24)
        want = greedy_generate(loaded.model, prompt, rules)
        wrong = [(t + 1) % vocab for t in want.tokens]
        # Right for a while, then wrong: the tree is cut where the model disagrees.
        half = [*want.tokens[:8], *wrong[8:]]
        for tokens, most in ((wrong, 0), (half, 7)):
            decoder = SpeculativeDecoder(
                sources=[*default_sources(heads=None, ngrams=None), FixedTokens(tokens)],
                cost_model=FLAT_COST,
            )
            got = decoder(loaded.model, prompt, rules)
            assert (got.tokens, got.stop_reason) == (want.tokens, want.stop_reason)
            assert got.stats["acceptedBySource"].get("fixed", 0) <= most
            assert "fixed" in decoder.describe()["draftSources"]
