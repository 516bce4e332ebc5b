"""Medusa heads: start as the base prediction, round-trip to disk, bind to their model, train."""

from __future__ import annotations

import json

import pytest
import torch
from test_speculative import prompts_from_files
from tiny_models import model_and_code_to_fit

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.heads import (
    HeadsConfig,
    HeadsDrafter,
    MedusaHeads,
    find_heads,
    lm_head_fingerprint,
    load_heads,
    model_dims,
    save_heads,
)
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.training.heads import HeadsTrainingConfig, active_heads, train_heads


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_untrained_heads_repeat_the_base_prediction(tiny_model_dir):
    model = load_model(tiny_model_dir, device="cpu").model
    hidden = torch.randn(5, model.config.hidden_size)
    heads = MedusaHeads(model.config.hidden_size, 3)
    states = heads(hidden)  # [3, 5, H]
    assert states.shape == (3, 5, model.config.hidden_size)
    assert torch.equal(states[2], hidden)


def test_heads_bind_to_their_model(tiny_model_dirs, tmp_path):
    llama = load_model(tiny_model_dirs["llama"], device="cpu").model
    qwen = load_model(tiny_model_dirs["qwen2"], device="cpu").model
    hidden, vocab = model_dims(llama)
    heads = MedusaHeads(hidden, 2)
    torch.nn.init.normal_(heads.blocks[1].linear.weight)
    config = HeadsConfig(
        num_heads=2, hidden_size=hidden, vocab_size=vocab, fingerprint=lm_head_fingerprint(llama)
    )
    save_heads(heads, config, tmp_path / "h")
    loaded, got = load_heads(tmp_path / "h", llama)
    assert got.num_heads == 2
    assert torch.equal(loaded.blocks[1].linear.weight, heads.blocks[1].linear.weight)
    assert load_heads(tmp_path / "h", qwen) is None  # same shapes, another model
    assert load_heads(tmp_path / "missing", llama) is None


def test_drafter_candidates_are_a_chain_and_detours(tiny_model_dir):
    model = load_model(tiny_model_dir, device="cpu").model
    heads = MedusaHeads(model.config.hidden_size, 3)
    drafter = HeadsDrafter(heads, model.get_output_embeddings(), top_k=3)
    for cand in drafter.candidates(torch.randn(model.config.hidden_size) * 30, limit=8):
        assert len(cand.tokens) == len(cand.probs) <= 3
        assert all(a >= b for a, b in zip(cand.probs, cand.probs[1:], strict=False))


def test_curriculum_adds_heads_over_time():
    cfg = HeadsTrainingConfig(model=None, data=[], num_heads=4, minutes=3)
    assert [active_heads(cfg, s) for s in (0, 59, 61, 121, 179)] == [2, 2, 3, 4, 4]


@pytest.mark.slow
def test_train_save_resume_and_decode_losslessly(tiny_model_dir, tmp_path):
    model_dir, data = model_and_code_to_fit(tiny_model_dir, tmp_path)
    cfg = HeadsTrainingConfig(
        model=str(model_dir), data=[str(data)], num_heads=3, minutes=0.1, val_fraction=0.3
    )
    out = train_heads(cfg)
    assert out == model_dir
    report = json.loads((model_dir / "heads.json").read_text())["report"]
    assert [h["head"] for h in report["heldOut"]] == [1, 2, 3]
    first_steps = report["steps"]
    cfg.minutes, cfg.resume = 0.15, True
    train_heads(cfg)
    report = json.loads((model_dir / "heads.json").read_text())["report"]
    assert report["steps"] > first_steps  # continued from the checkpoint
    loaded = load_model(model_dir, device="cpu")
    assert find_heads(loaded.model) is not None
    decoder = SpeculativeDecoder()
    for prompt in prompts_from_files(loaded.tokenizer, 10, seed=3):
        rules = StopRules(max_new_tokens=24)
        got = decoder(loaded.model, prompt, rules)
        assert got.tokens == greedy_generate(loaded.model, prompt, rules).tokens
    assert "heads" in decoder.describe()["draftSources"]


def test_feedback_scales_down_a_head_that_misses(tiny_model_dir):
    model = load_model(tiny_model_dir, device="cpu").model
    drafter = HeadsDrafter(MedusaHeads(model.config.hidden_size, 2), model.get_output_embeddings())
    hidden = torch.randn(model.config.hidden_size, generator=torch.Generator().manual_seed(0)) * 30
    for _ in range(20):
        cands = drafter.candidates(hidden, limit=4)
        drafter.feedback([cands[0].tokens[0] + 1])  # the first head is always wrong
    assert drafter.scale(0) < 0.2 and drafter.scale(1) == 1.0
