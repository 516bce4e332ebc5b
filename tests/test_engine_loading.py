from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from memosight_lsp.inference.fim import CODELLAMA, DEEPSEEK, QWEN, STARCODER, detect_fim_format
from memosight_lsp.inference.loading import ModelLoadError, load_model, load_tokenizer


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_loads_real_architectures_from_a_folder(tiny_model_dirs, arch):
    loaded = load_model(tiny_model_dirs[arch], device="cpu")
    assert loaded.device == torch.device("cpu")
    assert loaded.dtype == torch.float32
    assert loaded.fim is QWEN  # the tiny tokenizer carries the Qwen-style FIM tokens
    assert loaded.tokenizer.eos_token_id in loaded.stop_token_ids
    info = loaded.describe()
    assert info["fimFormat"] == "qwen"
    assert info["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert not loaded.model.training


def test_fim_override_none_and_unknown(tiny_model_dir):
    assert load_model(tiny_model_dir, fim_format="none").fim is None
    with pytest.raises(ModelLoadError, match="unknown FIM format"):
        load_model(tiny_model_dir, fim_format="bogus")


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ({"<fim_prefix>", "<fim_suffix>", "<fim_middle>"}, STARCODER),
        ({"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}, QWEN),
        ({"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}, DEEPSEEK),
        ({"▁<PRE>", "▁<SUF>", "▁<MID>"}, CODELLAMA),
        ({"hello", "world"}, None),
    ],
)
def test_detects_fim_format_of_known_families(tokens, expected):
    assert detect_fim_format(tokens) is expected


def test_codellama_prompt_is_spaced():
    assert CODELLAMA.build_psm("a", "b") == "▁<PRE> a ▁<SUF>b ▁<MID>"
    assert QWEN.build("a", "b") == "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"


def test_families_trained_suffix_first_get_spm_prompts():
    # The orders the families' own code spells (CodeLlama's generation.py, bigcode Megatron-LM).
    assert CODELLAMA.build("a", "b") == "▁<PRE> ▁<SUF>b ▁<MID> a"
    assert STARCODER.build("a", "b") == "<fim_prefix><fim_suffix>b<fim_middle>a"
    assert not QWEN.suffix_first and QWEN.build("a", "b") == QWEN.build_psm("a", "b")


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="model folder not found"):
        load_model(tmp_path / "nope")


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(tmp_path)


def test_folder_without_weights(tmp_path, tiny_model_dir):
    (tmp_path / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ModelLoadError, match="no weights"):
        load_model(tmp_path)


def test_folder_without_tokenizer(tmp_path, tiny_model_dir):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((tiny_model_dir / name).read_bytes())
    with pytest.raises(ModelLoadError, match="no tokenizer"):
        load_model(tmp_path)


def test_unsupported_architecture(tmp_path, tiny_model_dir):
    for f in Path(tiny_model_dir).iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"] = "no_such_architecture"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="unsupported model"):
        load_model(tmp_path)


def test_corrupt_weights(tmp_path, tiny_model_dir):
    for f in Path(tiny_model_dir).iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ModelLoadError):
        load_model(tmp_path)


def test_cuda_without_gpu_is_a_clear_error(tiny_model_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelLoadError, match="no CUDA device"):
        load_model(tiny_model_dir, device="cuda")


def test_tokenizer_alone(tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir)
    assert tokenizer.decode(tokenizer.encode("def f(x):")) == "def f(x):"
