"""Tiny randomly initialised models of real architectures, saved like any local HF model folder."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from memosight_lsp.training.tokenizer_training import train_tokenizer

STDLIB = Path(sysconfig.get_paths()["stdlib"])
TOKENIZER_SAMPLE_FILES = ("textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py")


def tiny_tokenizer(vocab_size: int = 600):
    texts = [(STDLIB / name).read_text() for name in TOKENIZER_SAMPLE_FILES]
    return train_tokenizer(texts, vocab_size)


# The Llama-family test models share one shape; the extras make each its own variant.
LLAMA_FAMILY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
}
LLAMA_FAMILY = {
    "llama": (LlamaConfig, {"tie_word_embeddings": True}),
    "qwen2": (Qwen2Config, {}),
    "qwen3": (Qwen3Config, {"head_dim": 16, "sliding_window": None}),
    "mistral": (MistralConfig, {"head_dim": 16, "sliding_window": None}),
}


def tiny_config(arch: str, vocab_size: int, eos_id: int, pad_id: int):
    common = {"vocab_size": vocab_size, "eos_token_id": eos_id, "pad_token_id": pad_id}
    if arch == "gpt2":
        return GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=2048, **common)
    if arch not in LLAMA_FAMILY:
        raise ValueError(arch)
    config_class, extra = LLAMA_FAMILY[arch]
    return config_class(**LLAMA_FAMILY_SHAPE, **extra, **common)


MODEL_CLASSES = {
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
    "gpt2": GPT2LMHeadModel,
    "qwen3": Qwen3ForCausalLM,
    "mistral": MistralForCausalLM,
}


def tiny_causal_lm(arch: str, vocab_size: int, eos_id: int, pad_id: int, seed: int = 0):
    """A tiny random model in memory (for architectures no saved-folder test needs)."""
    torch.manual_seed(seed)
    return MODEL_CLASSES[arch](tiny_config(arch, vocab_size, eos_id, pad_id)).eval()


def save_tiny_model(folder: Path, arch: str = "llama", seed: int = 0) -> Path:
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    config = tiny_config(arch, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    model = MODEL_CLASSES[arch](config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


FITTING_SAMPLE_FILES = (
    "textwrap.py",
    "shlex.py",
    "glob.py",
    "fnmatch.py",
    "string.py",
    "argparse.py",
)


def model_and_code_to_fit(tiny_model_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A writable copy of a saved tiny model and a folder of stdlib code to fit drafters on."""
    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    data = tmp_path / "data"
    data.mkdir()
    for name in FITTING_SAMPLE_FILES:
        shutil.copy(STDLIB / name, data / name)
    return model_dir, data
