"""GGUF files as models: tiny files this test writes (exact weights known) and a real one that a
registry package ships (SmolLM2-135M, fetched by ../shared/models/fetch.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

from memosight_lsp.inference import gguf as gguf_files
from memosight_lsp.inference.greedy import StopRules, greedy_generate
from memosight_lsp.inference.loading import ModelLoadError, load_model, load_tokenizer
from tests.tiny_gguf import write_tiny_gguf

ROOT = Path(__file__).resolve().parent.parent
FETCH = ROOT.parent / "shared" / "models" / "fetch.sh"
CODE = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x):\n"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits[0]  # [S, V]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_an_f32_gguf_loads_the_very_weights_it_holds(tmp_path, arch):
    path = tmp_path / f"tiny-{arch}.gguf"
    source, tokenizer = write_tiny_gguf(path, arch, "F32")
    loaded = load_model(path, device="cpu", dtype="float32")
    ids = torch.tensor([tokenizer.encode(CODE, add_special_tokens=False)])
    # llama: q/k rows come back from llama.cpp's rotary permutation exactly.
    assert torch.equal(logits_of(loaded.model, ids), logits_of(source, ids))
    assert type(loaded.model) is type(source)
    info = loaded.describe()
    assert info["source"] == str(path.resolve())
    assert info["gguf"] == "ALL_F32 (F32 100%)"
    assert info["fimFormat"] == "qwen"  # the tokenizer came from the file, special tokens too
    assert loaded.tokenizer.eos_token_id in loaded.stop_token_ids


def test_the_tokenizer_comes_from_the_file(tmp_path):
    path = tmp_path / "tiny.gguf"
    _, tokenizer = write_tiny_gguf(path, "llama", "F32")
    from_file = load_tokenizer(path)
    assert from_file.encode(CODE, add_special_tokens=False) == tokenizer.encode(
        CODE, add_special_tokens=False
    )
    assert from_file.decode(from_file.encode(CODE, add_special_tokens=False)) == CODE


def test_a_quantized_gguf_is_dequantized_close_to_its_source(tmp_path):
    path = tmp_path / "tiny-q8.gguf"
    source, tokenizer = write_tiny_gguf(path, "llama", "Q8_0")
    loaded = load_model(path, device="cpu", dtype="float32")
    ids = torch.tensor([tokenizer.encode(CODE, add_special_tokens=False)])
    reference, dequantized = logits_of(source, ids), logits_of(loaded.model, ids)
    assert not torch.equal(reference, dequantized)  # it really was quantized
    assert (reference - dequantized).abs().max() < 0.05
    assert loaded.describe()["gguf"].startswith("MOSTLY_Q8_0 (Q8_0 ")


def test_the_second_load_reuses_the_converted_folder(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", "F32")
    heard: list[str] = []
    first = load_model(path, device="cpu", dtype="float32", progress=heard.append)
    assert any("converting tiny.gguf" in m for m in heard)
    folder = gguf_files.converted_folder(path)
    assert (folder / "gguf.json").is_file()
    assert not list(folder.parent.glob("*.partial-*"))  # nothing half-written left behind
    heard.clear()
    second = load_model(path, device="cpu", dtype="float32", progress=heard.append)
    assert heard == []
    assert second.describe()["gguf"] == first.describe()["gguf"]
    # Another precision loads from the same folder.
    bf16 = load_model(path, device="cpu", dtype="bfloat16", progress=heard.append)
    assert heard == []
    assert bf16.dtype == torch.bfloat16
    assert next(bf16.model.parameters()).dtype == torch.bfloat16
    assert [p.name for p in folder.parent.iterdir() if p.is_dir()] == [folder.name]


def test_a_changed_file_is_converted_again(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", "F32", seed=0)
    first = gguf_files.converted_folder(path)
    write_tiny_gguf(path, "llama", "F32", seed=1)
    os.utime(path, ns=(1, 1))  # a different mtime, as a rewrite would give
    assert gguf_files.converted_folder(path) != first


def write_gguf_with_tensor(path: Path, arch: str, qtype: GGMLQuantizationType) -> None:
    """A minimal file: metadata plus one tensor of raw bytes in the given quantization type."""
    writer = GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    block, size = GGML_QUANT_SIZES[qtype]
    data = np.zeros((4, 256 // block * size), dtype=np.uint8)
    writer.add_tensor("token_embd.weight", data, raw_dtype=qtype)  # [4, 256] values
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_an_unsupported_architecture_is_one_clear_line(tmp_path):
    path = tmp_path / "rwkv.gguf"
    write_gguf_with_tensor(path, "rwkv6", GGMLQuantizationType.F32)
    with pytest.raises(ModelLoadError, match=r"architecture rwkv6 is not supported") as err:
        load_model(path, device="cpu")
    assert "\n" not in str(err.value)


def test_an_unsupported_quantization_type_is_one_clear_line(tmp_path):
    path = tmp_path / "q8k.gguf"
    write_gguf_with_tensor(path, "llama", GGMLQuantizationType.Q8_K)
    with pytest.raises(
        ModelLoadError, match=r"tensor token_embd.weight uses quantization type Q8_K"
    ):
        load_model(path, device="cpu")
    assert not list((tmp_path / "cache").rglob("*.partial-*"))


def test_a_file_that_is_not_gguf_and_a_missing_one(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        load_model(junk, device="cpu")
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        load_model(tmp_path / "absent.gguf", device="cpu")


def test_models_command_shows_the_source_file_and_quantization(tmp_path):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, "llama", "Q8_0")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "c")}
    command = [sys.executable, "-m", "memosight_lsp.cli_main", "models", "--model", str(path)]
    text = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    assert f"loaded from:  {path.resolve()}" in text
    assert "GGUF file:    MOSTLY_Q8_0 (Q8_0 " in text
    info = json.loads(
        subprocess.run(
            [*command, "--json"], capture_output=True, text=True, env=env, check=True
        ).stdout
    )
    assert info["gguf"].startswith("MOSTLY_Q8_0")


@pytest.fixture(scope="module")
def smollm2_gguf() -> Path:
    if not FETCH.is_file():
        pytest.skip("../shared/models/fetch.sh is not here (outside the project's machines)")
    out = subprocess.run([str(FETCH)], capture_output=True, text=True, check=True).stdout
    return Path(next(line for line in out.splitlines() if "smollm2" in line))


@pytest.mark.slow
def test_a_real_registry_shipped_gguf_completes_code(smollm2_gguf):
    loaded = load_model(smollm2_gguf, device="cpu", dtype="float32")
    assert loaded.describe()["gguf"].startswith("MOSTLY_Q4_1 (Q4_1 ")
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    tokenizer = loaded.tokenizer
    # A model whose weights came back wrong (a missed q/k permutation, a bad dequantization)
    # scores code like noise (~10 nats/token); this one reads it as code.
    text = (Path(textwrap.__file__)).read_text()[:2000]
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        loss = loaded.model(ids, labels=ids).loss.item()
    assert loss < 4.0  # measured 2.50; random ids score 13.4
    prompt = '# file: s.py\ndef fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    prompt += "    if n < 2:\n        return n\n    return"
    out = greedy_generate(
        loaded.model,
        tokenizer.encode(prompt, add_special_tokens=False),
        StopRules(max_new_tokens=20),
    )
    assert tokenizer.decode(out.tokens).startswith(" fibonacci(n - 1) + fibonacci(n - 2)")
