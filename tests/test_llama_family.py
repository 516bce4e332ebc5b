"""inference/llama_family.py: a model rebuilt from the quantized cache without transformers'
modeling code decodes exactly as transformers' class of it, and its start-up imports stay light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from memosight_lsp.inference import llama_family
from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.family_config import LlamaFamilyConfig
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.kv_cache import plain_attention
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
    assert real.__name__ != "LlamaFamilyConfig"
    assert isinstance(third.model.config, LlamaFamilyConfig)
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
        type(load_model(folder, device="cpu", dtype="bfloat16", quantization="int8").model.config)
        is LlamaFamilyConfig
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


def test_the_rotary_tables_of_each_scaling_equal_transformers():
    """The default, linear and llama3 tables made here equal transformers' own, from its config
    class and from the project's config read back from it."""
    llama3 = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    cases = [
        ("default", Qwen2Config(hidden_size=128, num_attention_heads=4, rope_theta=12345.0)),
        ("linear", LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 3.0})),
        ("llama3", LlamaConfig(hidden_size=256, num_attention_heads=2, rope_parameters=llama3)),
    ]
    for rope_type, config in cases:
        if rope_type == "default":
            from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

            want = Qwen2RotaryEmbedding.compute_default_rope_parameters(config)
        else:
            want = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
        for read in (config, LlamaFamilyConfig(config.to_dict())):
            inv_freq, scaling = llama_family.rope_tables(read)
            assert torch.equal(inv_freq, want[0]) and scaling == want[1], rope_type
            with torch.device("meta"):  # a cached load builds the skeleton under it
                assert torch.equal(llama_family.rope_tables(read)[0], want[0]), rope_type
    # A wrong factor is seen: the comparison can fail.
    linear = ROPE_INIT_FUNCTIONS["linear"](cases[1][1], "cpu")[0]
    wrong = LlamaConfig(rope_parameters={"rope_type": "linear", "factor": 2.0})
    assert not torch.equal(llama_family.rope_tables(wrong)[0], linear)


@pytest.mark.parametrize(
    "config",
    [
        Qwen2Config(),
        Qwen2Config(use_sliding_window=True, sliding_window=64, max_window_layers=1),
        MistralConfig(sliding_window=None),
        MistralConfig(sliding_window=64),
        LlamaConfig(),
        Qwen3Config(),
    ],
)
def test_plain_attention_is_read_as_transformers_reads_it(config):
    """Whether every layer is plain full attention: the project's config read without
    transformers says what transformers' DynamicCache makes of its own class."""
    assert plain_attention(LlamaFamilyConfig(config.to_dict())) == plain_attention(config)


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


# A fresh process loads the cached model and completes as the server does: a speculative decode
# with alternatives, then the same buffer typed through (its cache reused), then plain greedy.
SERVE_SCRIPT = """
import json, sys, time
from memosight_lsp.inference.decoder import BranchRules, StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import CostModel, SpeculativeDecoder

model = load_model(sys.argv[1], device="cpu", dtype="bfloat16", quantization="int8").model
prompts = json.loads(sys.argv[2])
decoder = SpeculativeDecoder(cost_model=CostModel({1: 1.0, 16: 1.0, 32: 2.0}))
branches = BranchRules(count=2, max_tokens=6, until=lambda greedy: time.monotonic() + 60)
out = []
for prompt in prompts:
    got = decoder(model, prompt, StopRules(max_new_tokens=12), buffer_id="a", branches=branches)
    out.append([got.tokens, [b.tokens for b in got.alternatives]])
out.append(greedy_generate(model, prompts[0], StopRules(max_new_tokens=12)).tokens)
loaded = sorted(m for m in ("transformers", "jinja2") if m in sys.modules)
print(json.dumps({"out": out, "loaded": loaded}))
"""


def test_serving_a_cached_model_never_imports_transformers(tmp_path):
    """Prefill, speculative decoding, alternatives and a typed-through buffer on the cached
    model in a fresh process import neither transformers nor jinja2, and decode what the
    folder's model (transformers' class) decodes."""
    folder = save_wide(tmp_path / "qwen2", "qwen2")
    for _ in range(2):  # fills the cache, then keeps the config beside it
        reference = load_model(folder, device="cpu", dtype="bfloat16", quantization="int8")
    prompts = [PROMPTS[0], [*PROMPTS[0], 17, 23]]  # the second types on after the first
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-c", SERVE_SCRIPT, str(folder), json.dumps(prompts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["loaded"] == []
    greedy = [
        greedy_generate(reference.model, prompt, StopRules(max_new_tokens=12)).tokens
        for prompt in prompts
    ]
    assert [tokens for tokens, _ in answer["out"][:2]] == greedy
    assert answer["out"][2] == greedy[0]
