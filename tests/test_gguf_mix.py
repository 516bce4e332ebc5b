"""Quantization "gguf": each weight int8 or int4 as its GGUF file stored it, the 4-bit ones on
the file's own grid (inference/gguf.py mixed_plan)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gguf import GGUFReader, dequantize

from memosight_lsp.inference import gguf as gguf_files
from memosight_lsp.inference import native_kernels, precision
from memosight_lsp.inference.fused_trunk import prepare_trunk
from memosight_lsp.inference.kv_cache import new_cache
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.quantize import QuantizedLinear, SplitProduct
from tests.tiny_gguf import write_tiny_gguf

CODE = "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x):\n"
NEEDS_NATIVE = pytest.mark.skipif(
    native_kernels.unsupported_reason() is not None,
    reason=f"native kernels: {native_kernels.unsupported_reason()}",
)
# Wide enough for int4 groups and Q4_K's 256-value super-blocks (head size 64).
SHAPE = {"hidden_size": 256, "intermediate_size": 512, "head_dim": 64}
# A mix like llama.cpp's Q4_K_M for small models: 4-bit grids, and 5-8-bit types.
TYPES = {
    "attn_q": "Q4_1",  # llama: rows permuted by the converter, and back by the conversion
    "attn_k": "Q8_0",
    "attn_v": "Q6_K",
    "attn_output": "Q5_0",
    "ffn_gate": "Q4_0",
    "ffn_up": "F16",
    "ffn_down": "Q4_K",
}
WANT = {  # kind per projection
    "q_proj": "int4",
    "k_proj": "int8",
    "v_proj": "int8",
    "o_proj": "int8",
    "gate_proj": "int4",
    "up_proj": "int8",
    "down_proj": "int4",
}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def mixed_gguf(tmp_path):
    path = tmp_path / "tiny-mixed.gguf"
    _, tokenizer = write_tiny_gguf(path, "llama", "Q8_0", shape=SHAPE, types=TYPES)
    return path, tokenizer


def file_values(path) -> dict[str, np.ndarray]:
    """Each matrix as the file's dequantize gives it, q/k rows back in the model's order."""
    reader = GGUFReader(path)
    values = {}
    for tensor in reader.tensors:
        array = dequantize(tensor.data, tensor.tensor_type)
        if tensor.name.endswith("attn_q.weight"):  # undo llama.cpp's rotary permutation
            array = array.reshape(4, -1, 2, array.shape[1]).swapaxes(1, 2).reshape(array.shape)
        values[tensor.name] = array
    return values


def test_the_kind_follows_the_bits_of_the_type():
    for name in ("Q4_0", "Q4_1", "Q4_K", "Q3_K", "Q2_K"):
        assert gguf_files.kind_of_type(name) == "int4", name
    for name in ("Q5_0", "Q5_K", "Q6_K", "Q8_0", "F16", "BF16", "F32"):
        assert gguf_files.kind_of_type(name) == "int8", name


@NEEDS_NATIVE
def test_each_weight_keeps_its_type_and_4_bit_ones_the_files_values(mixed_gguf):
    path, tokenizer = mixed_gguf
    loaded = load_model(path, device="cpu", dtype="bfloat16", quantization="gguf")
    assert loaded.precision.describe().startswith("int8 / int4 weights as the GGUF file's")
    values = file_values(path)
    for i, layer in enumerate(loaded.model.model.layers):
        modules = {**dict(layer.self_attn.named_children()), **dict(layer.mlp.named_children())}
        for proj, kind in WANT.items():
            module = modules[proj]
            assert isinstance(module, QuantizedLinear)
            assert module.quantized.kind == kind, (i, proj)
        role = {"q_proj": "attn_q", "gate_proj": "ffn_gate", "down_proj": "ffn_down"}
        for proj, gguf_role in role.items():
            got = modules[proj].quantized.dequantized()
            want = torch.from_numpy(np.ascontiguousarray(values[f"blk.{i}.{gguf_role}.weight"]))
            assert torch.equal(got, want), (i, proj)  # the file's values, bit for bit
    # q int4 beside k/v int8: one product each, side by side
    trunk = prepare_trunk(loaded.model)
    assert isinstance(trunk.layers[0].qkv, SplitProduct)
    ids = torch.tensor([tokenizer.encode(CODE, add_special_tokens=False)])
    with torch.no_grad():
        own = loaded.model(ids).logits[0].float()
    fused = trunk.logits(trunk(ids, new_cache(loaded.model)))
    assert (own - fused).abs().max() < 0.05 * own.abs().max()


@NEEDS_NATIVE
def test_the_kept_form_comes_back_alike_and_int4_still_means_int4(mixed_gguf):
    path, _ = mixed_gguf
    first = load_model(path, device="cpu", dtype="bfloat16", quantization="gguf")
    again = load_model(path, device="cpu", dtype="bfloat16", quantization="gguf")
    int4 = load_model(path, device="cpu", dtype="bfloat16", quantization="int4")
    down = [m.model.model.layers[0].mlp.down_proj.quantized for m in (first, again, int4)]
    assert torch.equal(down[0].dequantized(), down[1].dequantized())
    v_proj = [m.model.model.layers[0].self_attn.v_proj.quantized for m in (first, int4)]
    assert [v.kind for v in v_proj] == ["int8", "int4"]


def test_auto_measures_the_files_own_mix_under_its_own_key(mixed_gguf, monkeypatch, tmp_path):
    path, _ = mixed_gguf
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    monkeypatch.setattr(precision, "SMALL_MODEL_BYTES", 0)
    asked: list[str] = []
    real = precision._measure

    def measure(load, tokenizer, candidates):
        asked.extend(c.quantization for c in candidates)
        return real(load, tokenizer, candidates)

    monkeypatch.setattr(precision, "_measure", measure)
    load_model(path, device="cpu")
    assert asked == ["none", "none", "gguf"]  # float32, bfloat16, the file's mix
    saved = json.loads((tmp_path / "cache" / "memosight" / "precision.json").read_text())
    (key,) = saved
    assert key.endswith(f"|gguf {gguf_files.mix_rule()}")


def test_gguf_asked_for_is_what_auto_chose_and_shares_its_kept_form(
    mixed_gguf, monkeypatch, tmp_path
):
    path, tokenizer = mixed_gguf
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    monkeypatch.setattr(precision, "SMALL_MODEL_BYTES", 0)
    # auto's timing picks among float32, bfloat16 and the mix: here it must pick the mix.
    monkeypatch.setattr(
        precision, "_best", lambda measured: next(m for m in measured if m.quantization == "gguf")
    )
    ids = torch.tensor([tokenizer.encode(CODE, add_special_tokens=False)])  # [1, S]

    def weights_and_logits(loaded) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        weights = {
            name: module.quantized.dequantized()
            for name, module in loaded.model.named_modules()
            if isinstance(module, QuantizedLinear)
        }
        with torch.no_grad():
            return weights, loaded.model(ids).logits[0].float()  # [S, V]

    def kept() -> list[str]:
        return sorted(
            p.name for p in (tmp_path / "cache" / "memosight" / "quantized").glob("*.safetensors")
        )

    auto = load_model(path, device="cpu")
    assert (auto.dtype, auto.precision.quantization) == (torch.bfloat16, "gguf")
    assert "measured" in auto.precision.reason
    kept_by_auto = kept()
    asked = load_model(path, device="cpu", quantization="gguf")
    assert (asked.dtype, asked.precision.quantization) == (torch.bfloat16, "gguf")
    assert asked.precision.reason == "asked for"
    assert kept() == kept_by_auto  # the same weights, kept once
    # Made afresh from the file, without auto's kept form: the same weights and logits still.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    fresh = load_model(path, device="cpu", quantization="gguf")
    want_weights, want_logits = weights_and_logits(auto)
    for loaded in (asked, fresh):
        weights, logits = weights_and_logits(loaded)
        assert weights.keys() == want_weights.keys() and weights
        for name, weight in weights.items():
            assert torch.equal(weight, want_weights[name]), name
        assert torch.equal(logits, want_logits)


def test_the_tensor_names_are_kept_at_conversion_and_made_again_when_stale(mixed_gguf):
    path, _ = mixed_gguf
    folder = gguf_files.converted_folder(path)
    kept = folder / gguf_files.NAMES_FILE
    written = json.loads(kept.read_text())
    names = written["names"]
    assert names["blk.0.attn_q.weight"] == "model.layers.0.self_attn.q_proj.weight"
    plan = gguf_files.mixed_plan(folder)  # read back: the same kinds as from a fresh map
    kept.write_text(json.dumps({"transformers": "0.0-other", "names": {"x": "y"}}))
    assert gguf_files.mixed_plan(folder).kinds == plan.kinds  # a stale map is made again
    assert json.loads(kept.read_text()) == written
    kept.write_text("{not json")
    assert gguf_files.mixed_plan(folder).kinds == plan.kinds
    assert json.loads(kept.read_text()) == written
