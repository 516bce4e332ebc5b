"""Prediction heads in a serving engine's own format, so the engine speculates with them.

vLLM's Medusa speculator (`--speculative-config '{"method": "medusa", "model": DIR, ...}'`)
runs residual blocks h + SiLU(W h + b) over the target model's final hidden state and the
target's LM head: the very heads `memosight train heads` fits (inference/heads.py), so the export is
a renaming. llama.cpp and Ollama have no Medusa-style speculator; they get n-gram lookup or a
draft model instead (docs/deployment.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from .heads import heads_folders, load_heads, model_dims
from .loading import LoadedModel

VLLM_MEDUSA = "vllm-medusa"


class ExportError(Exception):
    """Nothing to export (one line)."""


def export_vllm_medusa(loaded: LoadedModel, out: Path) -> Path:
    """Write the loaded model's heads as a vLLM Medusa checkpoint folder (config.json +
    model.safetensors) and return it."""
    model = loaded.model
    found = None
    for folder in heads_folders(model):
        found = load_heads(folder, model)
        if found is not None:
            break
    if found is None:
        raise ExportError(f"{loaded.name} has no prediction heads: run `memosight train heads`")
    heads, config = found
    hidden, vocab = model_dims(model)
    state = {}
    for name, tensor in heads.state_dict().items():  # blocks.{i}.linear.{weight,bias}
        state[name.replace(".linear.", ".layers.0.")] = tensor.detach().float().contiguous()
    # original_lm_head: one LM head, the target model's own (ours are frozen to it).
    lm_head = model.get_output_embeddings().weight.detach().float().contiguous()
    state["lm_head.weight"] = lm_head.clone()
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"))
    medusa = {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "hidden_size": hidden,
        "vocab_size": vocab,
        "truncated_vocab_size": vocab,
        "num_heads": config.num_heads,
        "num_hidden_layers": 1,
        "medusa_fc_bias": True,
        "original_lm_head": True,
        "torch_dtype": "float32",
        "memosight": {"fingerprint": config.fingerprint, "base": loaded.source},
    }
    (out / "config.json").write_text(json.dumps(medusa, indent=2) + "\n")
    return out
