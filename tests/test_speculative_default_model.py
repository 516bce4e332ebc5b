"""With the embedded default model: lossless on held-out third-party code, drafts really used."""

from __future__ import annotations

import pytest
import torch

from memosight_lsp.bench.speed import default_files, sample_prompts
from memosight_lsp.completion.service import CompletionEngine
from memosight_lsp.engine.greedy import StopRules, greedy_generate
from memosight_lsp.engine.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.engine.speculative import SpeculativeDecoder

pytestmark = pytest.mark.skipif(
    not (EMBEDDED_MODEL_DIR / "config.json").is_file(), reason="no embedded default model yet"
)


@pytest.mark.slow
def test_default_model_is_lossless_on_held_out_code():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loaded = load_model(None, device="cpu")
        engine = CompletionEngine(loaded, speculative=False)
        prompts = sample_prompts(engine, default_files(), 100, budget=384, seed=7)
        decoder = SpeculativeDecoder()
        rules = StopRules(max_new_tokens=32, stop_token_ids=loaded.stop_token_ids)
        passes = tokens = 0
        for i, sample in enumerate(prompts):
            want = greedy_generate(loaded.model, sample["ids"], rules)
            got = decoder(loaded.model, sample["ids"], rules, buffer_id=f"b{i % 4}")
            assert got.tokens == want.tokens, f"{sample['file']}:{sample['line']}"
            passes += got.forward_passes
            tokens += len(got.tokens)
        assert len(prompts) == 100
        assert tokens / passes > 1.5  # drafts are accepted, several tokens per pass
    finally:
        torch.set_num_threads(before)
