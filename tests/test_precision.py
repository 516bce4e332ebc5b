"""Which precision a model runs in: what the settings ask for, and the measured `auto`."""

from __future__ import annotations

import json

import pytest
import torch

from memosight_lsp.engine import precision
from memosight_lsp.engine.loading import ModelLoadError, load_model

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("dtype", "quantization", "native", "want"),
    [
        ("float32", "auto", True, (torch.float32, "none")),
        ("bfloat16", "none", True, (torch.bfloat16, "none")),
        ("auto", "int8", True, (torch.bfloat16, "int8")),
        ("auto", "int4", False, (torch.float32, "int4")),  # no native bf16: fp32 activations
        ("float32", "int8", True, (torch.float32, "int8")),
        ("auto", "none", True, (torch.float32, "none")),
        ("auto", "auto", False, (torch.float32, "none")),  # nothing to gain: no measuring
    ],
)
def test_what_the_settings_ask_for(monkeypatch, dtype, quantization, native, want):
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    chosen = precision.explicit(dtype, quantization, CPU)
    assert chosen is not None
    assert (chosen.dtype, chosen.quantization) == want


def test_auto_on_a_cpu_with_native_bf16_is_left_to_measure(monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    assert precision.explicit("auto", "auto", CPU) is None


def test_bad_values_are_one_clear_error(tiny_model_dir):
    with pytest.raises(ModelLoadError, match="unknown quantization 'int3'"):
        load_model(tiny_model_dir, device="cpu", quantization="int3")
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8'"):
        load_model(tiny_model_dir, device="cpu", dtype="float8")


def test_a_small_model_stays_float32_without_measuring(tiny_model_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    loaded = load_model(tiny_model_dir, device="cpu")
    assert (loaded.dtype, loaded.precision.quantization) == (torch.float32, "none")
    assert "small model" in loaded.precision.reason
    assert not (tmp_path / "cache" / "memosight" / "precision.json").exists()


def test_measured_choice_is_cached_and_only_kept_where_quality_holds(tiny_model_dir, tmp_path):
    from transformers import AutoConfig

    from memosight_lsp.engine.loading import _load_weights, load_tokenizer

    config = AutoConfig.from_pretrained(tiny_model_dir)
    loads: list[str] = []

    def load(chosen: precision.Precision):
        loads.append(chosen.describe())
        if chosen.quantization == "int4":  # what load_model's loader answers for it here
            return None
        return _load_weights(tiny_model_dir, config, chosen, CPU)

    tokenizer = load_tokenizer(tiny_model_dir)
    first = precision.choose(tiny_model_dir, load, tokenizer, small_model_bytes=0)
    # int4 cannot take the tiny model's 64-wide products: skipped, the others measured.
    assert loads == ["float32", "bfloat16", "int8 weights, bfloat16", "int4 weights, bfloat16"]
    assert first.reason.startswith("measured on this machine")
    saved = json.loads((tmp_path / "cache" / "memosight" / "precision.json").read_text())
    (entry,) = saved.values()
    measured = {
        m["quantization"] if m["quantization"] != "none" else m["dtype"]: m
        for m in entry["measurements"]
    }
    assert set(measured) == {"float32", "bfloat16", "int8"}
    assert measured["float32"]["agreement"] == 1.0
    assert all(m["one_token_ms"] > 0 and m["eight_tokens_ms"] > 0 for m in measured.values())
    chosen = entry["choice"]
    assert (
        measured[chosen["quantization"] if chosen["quantization"] != "none" else chosen["dtype"]][
            "agreement"
        ]
        >= precision.AGREEMENT_FLOOR
    )
    # The second time nothing is loaded or timed.
    loads.clear()
    again = precision.choose(tiny_model_dir, load, tokenizer, small_model_bytes=0)
    assert loads == []
    assert (again.dtype, again.quantization) == (first.dtype, first.quantization)


def test_the_fastest_good_candidate_wins_and_float32_keeps_near_ties():
    def m(name, quantization, cost, agreement=1.0):
        return precision.Measurement(
            dtype=name,
            quantization=quantization,
            one_token_ms=cost / 2,
            eight_tokens_ms=cost / 2,
            agreement=agreement,
        )

    reference = m("float32", "none", 100)
    assert precision._best([reference, m("bfloat16", "none", 95)]) is reference  # a near-tie
    fast = m("bfloat16", "int8", 50)
    assert precision._best([reference, m("bfloat16", "none", 80), fast]) is fast
    sloppy = m("bfloat16", "int4", 20, agreement=0.9)  # quality does not hold
    assert precision._best([reference, fast, sloppy]) is fast


def test_load_model_measures_auto_for_a_large_enough_model(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    monkeypatch.setattr(precision, "SMALL_MODEL_BYTES", 0)
    heard: list[str] = []
    loaded = load_model(tiny_model_dir, device="cpu", progress=heard.append)
    assert heard == ["measuring which precision runs this model fastest here (once)"]
    assert loaded.precision.reason.startswith("measured on this machine (1/8-token passes:")
    assert "int4" not in loaded.precision.reason  # its products are too narrow: skipped
    assert loaded.dtype == next(loaded.model.parameters()).dtype
