"""inference/llama_family.py: a model rebuilt from the quantized cache without transformers'
modeling code decodes exactly as transformers' class of it, and its start-up imports stay light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, MistralConfig, Qwen2Config

from memosight_lsp.inference import llama_family
from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model, position_limit
from tests.test_quantize import wide_model
from tests.tiny_models import tiny_tokenizer

PROMPTS = [list(range(5, 60)), [7, 3, 250, 11, 11, 11, 42, 9], list(range(200, 120, -3))]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def save_wide(folder, arch: str, tied: bool = False):
    model = wide_model(arch, tied=tied).float()
    model.save_pretrained(folder)
    tiny_tokenizer(300).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize(("arch", "tied"), [("llama", False), ("qwen2", True), ("qwen3", False)])
def test_the_cached_model_decodes_as_transformers_class(tmp_path, arch, tied, kind):
    folder = save_wide(tmp_path / arch, arch, tied)
    first = load_model(folder, device="cpu", dtype="bfloat16", quantization=kind)  # quantizes
    second = load_model(folder, device="cpu", dtype="bfloat16", quantization=kind)  # the cache
    assert type(first.model).__name__ != "LlamaFamilyForCausalLM"
    assert isinstance(second.model, llama_family.LlamaFamilyForCausalLM)
    assert set(second.model.state_dict()) == set(first.model.state_dict())
    for prompt in PROMPTS:
        rules = StopRules(max_new_tokens=16)
        assert greedy_generate(second.model, prompt, rules).tokens == (
            greedy_generate(first.model, prompt, StopRules(max_new_tokens=16)).tokens
        )
    # Called as transformers calls a model (KV compression, chunk scoring): the same logits,
    # from transformers' class built around the very same weights.
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        ours, theirs = second.model(input_ids=ids).logits, first.model(input_ids=ids).logits
    assert torch.equal(ours, theirs)
    twin = second.model.transformers_model()
    assert twin.model.layers[0].self_attn.q_proj is second.model.model.layers[0].self_attn.q_proj
    assert sum(1 for _ in second.model.parameters()) == sum(
        1 for _ in second.model.named_parameters()
    )  # the twin is not a submodule: each weight counted once


@pytest.mark.parametrize(("arch", "tied"), [("qwen2", True), ("llama", False)])
def test_a_kept_config_decodes_as_the_folder_config(tmp_path, arch, tied):
    """The third load reads the config the second kept beside the quantized model (no import
    of transformers' model packages): the same tokens and logits, and the twin gets the model
    type's own config class back."""
    folder = save_wide(tmp_path / arch, arch, tied)
    load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")  # quantizes
    second = load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    third = load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    real = type(second.model.config)
    assert real.__name__ != "PreTrainedConfig"
    assert type(third.model.config).__name__ == "PreTrainedConfig"
    for prompt in PROMPTS:
        rules = StopRules(max_new_tokens=16)
        assert greedy_generate(third.model, prompt, rules).tokens == (
            greedy_generate(second.model, prompt, StopRules(max_new_tokens=16)).tokens
        )
    ids = torch.tensor([PROMPTS[0]])
    with torch.inference_mode():
        assert torch.equal(third.model(input_ids=ids).logits, second.model(input_ids=ids).logits)
    assert type(third.model.transformers_model().config) is real
    assert position_limit(third.model.config) == position_limit(second.model.config)


def test_a_kept_config_of_another_transformers_version_is_not_read(tmp_path):
    folder = save_wide(tmp_path / "qwen2", "qwen2", True)
    for _ in range(2):  # quantizes, then keeps the config
        load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    (kept,) = (tmp_path / "cache" / "memosight" / "quantized").glob("*.config.json")
    values = json.loads(kept.read_text())
    kept.write_text(json.dumps({**values, "transformers": "0.0.1"}))
    again = load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    assert type(again.model.config).__name__ == "Qwen2Config"
    assert json.loads(kept.read_text())["transformers"] != "0.0.1"  # kept again by this one
    assert (
        type(
            load_model(folder, device="cpu", dtype="bfloat16", quantization="int8").model.config
        ).__name__
        == "PreTrainedConfig"
    )


def test_the_rotary_tables_match_transformers(tmp_path):
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    config = Qwen2Config(hidden_size=128, num_attention_heads=4, rope_theta=12345.0)
    positions = torch.arange(0, 700)[None]
    x = torch.zeros(1, 1, dtype=torch.bfloat16)
    ours = llama_family.RotaryEmbedding(config)(x, position_ids=positions)
    theirs = Qwen2RotaryEmbedding(config)(x, position_ids=positions)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        (AutoConfig.for_model("gpt2"), "not of the Llama family"),
        (MistralConfig(sliding_window=64), "sliding-window"),
        (
            Qwen2Config(rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
            "rotary scaling 'dynamic'",
        ),
        (Qwen2Config(hidden_act="gelu"), "activation"),
    ],
)
def test_models_it_cannot_reproduce_keep_transformers_class(config, reason):
    assert reason in (llama_family.unsupported_reason(config) or "")


def test_loading_a_cached_model_imports_no_modeling_code(tmp_path):
    folder = save_wide(tmp_path / "qwen2", "qwen2")
    for _ in range(2):  # fills the cache, then keeps the config beside it
        load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    script = (
        "import json, sys\n"
        "from memosight_lsp.inference.loading import load_model\n"
        f"load_model({str(folder)!r}, device='cpu', dtype='bfloat16', quantization='int8')\n"
        "heavy = [m for m in sys.modules if m.startswith('transformers.models') or "
        "m in ('torch._dynamo', 'sympy')]\n"
        "print(json.dumps(heavy))\n"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
