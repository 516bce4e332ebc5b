"""The embedded model's prediction heads as a vLLM Medusa checkpoint: the same numbers under
vLLM's names (its ResidualBlock is h + SiLU(W h + b), one shared LM head: the model's)."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from memosight_lsp.inference.heads import heads_folders, load_heads
from memosight_lsp.inference.heads_export import export_vllm_medusa
from memosight_lsp.inference.loading import load_model


def test_the_export_predicts_what_our_heads_predict(tmp_path):
    loaded = load_model(None, device="cpu", dtype="float32", quantization="none")
    out = export_vllm_medusa(loaded, tmp_path / "medusa")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["MedusaModel"] and config["original_lm_head"]
    assert (config["hidden_size"], config["vocab_size"]) == (256, 8192)
    weights = load_file(str(out / "model.safetensors"))
    heads, _ = next(h for f in heads_folders(loaded.model) if (h := load_heads(f, loaded.model)))
    assert config["num_heads"] == heads.num_heads
    hidden = torch.randn(3, config["hidden_size"])  # [R, H]
    with torch.no_grad():
        ours = loaded.model.get_output_embeddings()(heads(hidden))  # [K, R, V]
        for i in range(config["num_heads"]):
            w, b = weights[f"blocks.{i}.layers.0.weight"], weights[f"blocks.{i}.layers.0.bias"]
            theirs = (hidden + torch.nn.functional.silu(hidden @ w.T + b)) @ weights[
                "lm_head.weight"
            ].T
            assert torch.allclose(theirs, ours[i], atol=1e-4)
