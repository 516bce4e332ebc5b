"""Tiny GGUF files written the way llama.cpp's converter writes them, from tiny HF models.

The test knows the exact weights, so a load through the project's GGUF path can be compared with
the model the file was made from (F32: identical logits; Q8_0: within quantization error).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from gguf import (
    GGML_QUANT_SIZES,
    GGMLQuantizationType,
    GGUFWriter,
    LlamaFileType,
    TokenType,
    quantize,
)

from tests.tiny_models import MODEL_CLASSES, tiny_config, tiny_tokenizer


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary-pair permutation of q/k rows for the llama architecture."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _tokenizer_fields(writer: GGUFWriter, tokenizer) -> None:
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = tokenizer.get_vocab()
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    special = set(tokenizer.all_special_tokens) | {
        t.content for t in tokenizer.added_tokens_decoder.values()
    }
    types = [TokenType.CONTROL if t in special else TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    if tokenizer.pad_token_id is not None:
        writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_add_bos_token(False)


def random_k_blocks(rows: int, columns: int, qtype: GGMLQuantizationType, seed: int) -> np.ndarray:
    """A Q4_K or Q6_K tensor's bytes [rows, row bytes] (gguf-py cannot quantize to these):
    random values, scales and minimums, the float16 super-block scales small and finite."""
    block, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(rows * columns // block, size), dtype=np.uint8)
    scale = rng.uniform(1e-4, 2e-3, size=(data.shape[0], 1)).astype(np.float16).view(np.uint8)
    if qtype == GGMLQuantizationType.Q4_K:  # d and dmin first
        data[:, 0:2] = scale
        data[:, 2:4] = scale[::-1]
    elif qtype == GGMLQuantizationType.Q6_K:  # d last
        data[:, -2:] = scale
    else:
        raise ValueError(qtype)
    return data.reshape(rows, -1)


def write_tiny_gguf(
    path: Path,
    arch: str = "llama",
    quant: str = "F32",
    seed: int = 0,
    *,
    shape: dict | None = None,
    types: dict[str, str] | None = None,
):
    """Write a tiny `arch` model (llama or qwen2) as GGUF; returns the HF model it holds.
    `shape`: config values over the tiny ones; `types`: quantization types of some matrices by
    their GGUF role ("ffn_down": "Q4_K"), the rest `quant` (Q4_K and Q6_K ones hold random
    blocks, not the model's weights)."""
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    config = tiny_config(arch, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    for key, value in (shape or {}).items():
        setattr(config, key, value)
    model = MODEL_CLASSES[arch](config).eval()
    writer = GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(float(config.rope_parameters["rope_theta"]))
    if arch == "llama":
        writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_file_type(LlamaFileType.ALL_F32 if quant == "F32" else LlamaFileType.MOSTLY_Q8_0)
    _tokenizer_fields(writer, tokenizer)

    def add(name: str, tensor: torch.Tensor, *, matrix: bool = True) -> None:
        values = tensor.detach().float().numpy()
        role = name.split(".")[-2]
        qtype = GGMLQuantizationType[(types or {}).get(role, quant) if matrix else "F32"]
        if qtype in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K):
            rows, columns = values.shape
            seed_of = sum(map(ord, name))
            writer.add_tensor(name, random_k_blocks(rows, columns, qtype, seed_of), raw_dtype=qtype)
        elif qtype != GGMLQuantizationType.F32:
            writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, values)

    base = model.model
    add("token_embd.weight", base.embed_tokens.weight)
    for i, layer in enumerate(base.layers):
        attn, mlp = layer.self_attn, layer.mlp
        q, k = attn.q_proj.weight, attn.k_proj.weight
        if arch == "llama":  # llama.cpp stores q/k rows permuted for its rotary layout
            q = torch.from_numpy(_permute(q.detach().numpy(), config.num_attention_heads))
            k = torch.from_numpy(_permute(k.detach().numpy(), config.num_key_value_heads))
        add(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight, matrix=False)
        add(f"blk.{i}.attn_q.weight", q)
        add(f"blk.{i}.attn_k.weight", k)
        add(f"blk.{i}.attn_v.weight", attn.v_proj.weight)
        for proj, short in ((attn.q_proj, "q"), (attn.k_proj, "k"), (attn.v_proj, "v")):
            if proj.bias is not None:
                add(f"blk.{i}.attn_{short}.bias", proj.bias, matrix=False)
        add(f"blk.{i}.attn_output.weight", attn.o_proj.weight)
        add(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight, matrix=False)
        add(f"blk.{i}.ffn_gate.weight", mlp.gate_proj.weight)
        add(f"blk.{i}.ffn_up.weight", mlp.up_proj.weight)
        add(f"blk.{i}.ffn_down.weight", mlp.down_proj.weight)
    add("output_norm.weight", base.norm.weight, matrix=False)
    if not config.tie_word_embeddings:
        add("output.weight", model.lm_head.weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, tokenizer
