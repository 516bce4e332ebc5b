"""A quantized model is kept on disk after its first load and read back as it was."""

from __future__ import annotations

import pytest
import torch

from memosight_lsp.inference import quantized_cache
from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.fast_tokenizer import FastTokenizer
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.quantize import QuantizedEmbedding, QuantizedLinear
from tests.test_quantize import wide_model
from tests.tiny_models import tiny_tokenizer


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def wide_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wide")
    tokenizer = tiny_tokenizer(300)
    model = wide_model("qwen2").float()
    model.config.vocab_size = 300
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(loaded) -> list[int]:
    prompt = list(range(5, 60))
    return greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=12)).tokens


@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_the_second_load_reads_the_kept_quantized_model(wide_folder, tmp_path, kind):
    first = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization=kind)
    kept = list((tmp_path / "cache" / "memosight" / "quantized").glob("*.safetensors"))
    assert len(kept) == 1
    second = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization=kind)
    assert run(second) == run(first)
    assert second.num_parameters == first.num_parameters
    heads = [m for m in second.model.modules() if isinstance(m, QuantizedLinear)]
    assert heads and all(m.quantized.kind in (kind, "int8") for m in heads)
    table, kept_table = first.model.get_input_embeddings(), second.model.get_input_embeddings()
    assert isinstance(kept_table, QuantizedEmbedding) and kept_table.shared == table.shared
    assert torch.equal(kept_table(torch.arange(300)), table(torch.arange(300)))
    if kept_table.shared:  # stored once, with the head
        assert kept_table.quantized is second.model.get_output_embeddings().quantized
    with torch.no_grad():  # the model's own forward runs too (rotary tables recomputed)
        logits = second.model(torch.tensor([list(range(5, 20))])).logits
    assert torch.isfinite(logits).all()


def test_a_corrupt_kept_file_is_made_again(wide_folder, tmp_path):
    first = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    (kept,) = (tmp_path / "cache" / "memosight" / "quantized").glob("*.safetensors")
    kept.write_bytes(kept.read_bytes()[:1000])  # a half-written or damaged file
    again = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert run(again) == run(first)
    assert kept.stat().st_size > 1000  # written whole again
    assert not list(kept.parent.glob("*.tmp-*"))


def test_each_quantization_has_its_own_file(wide_folder):
    int8 = quantized_cache.cache_file(wide_folder, "int8", torch.bfloat16)
    assert int8 != quantized_cache.cache_file(wide_folder, "int4", torch.bfloat16)
    assert int8 != quantized_cache.cache_file(wide_folder, "int8", torch.float32)


def test_a_kept_file_with_its_end_cut_off_is_made_again(wide_folder, tmp_path):
    first = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    (kept,) = (tmp_path / "cache" / "memosight" / "quantized").glob("*.safetensors")
    whole = kept.read_bytes()
    kept.write_bytes(whole[:-100])  # the header whole, the last tensor short
    with pytest.raises(ValueError, match="truncated"):
        quantized_cache.read_tensors(kept)
    again = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert run(again) == run(first)
    assert kept.stat().st_size == len(whole)


def test_the_cached_load_reads_the_tokenizer_beside_the_weights(wide_folder, monkeypatch):
    load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    beside: list[str] = []
    original = quantized_cache.read_tensors

    def watched(path, meanwhile=None):  # the real read, noting what ran beside it
        beside.append("meanwhile given" if meanwhile is not None else "none")
        return original(path, meanwhile)

    monkeypatch.setattr(quantized_cache, "read_tensors", watched)
    loaded = load_model(wide_folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert beside == ["meanwhile given"]
    assert isinstance(loaded.tokenizer, FastTokenizer)  # the kept tokenizer, read beside
    assert loaded.tokenizer.encode("def f(x):\n    return x\n", add_special_tokens=False)
