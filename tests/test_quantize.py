"""Weight-only int8 / int4 products against their dequantized reference, and whole tiny models
of real architectures quantized in place."""

from __future__ import annotations

import pytest
import torch

from memosight_lsp.inference import native_kernels
from memosight_lsp.inference.fused_trunk import FusedTrunk, prepare_trunk
from memosight_lsp.inference.kv_cache import new_cache
from memosight_lsp.inference.quantize import (
    INT4_GROUP,
    MANY_ROWS,
    QuantizedEmbedding,
    QuantizedLinear,
    QuantizedProduct,
    concat,
    quantize_model,
    quantize_weight,
)
from tests.tiny_models import tiny_causal_lm

KINDS = ["int8", "int4"]
# int4 in both layouts: torch's kernel and the native one (where it can be built here).
NEEDS_NATIVE = pytest.mark.skipif(
    native_kernels.unsupported_reason() is not None,
    reason=f"native kernels: {native_kernels.unsupported_reason()}",
)
VARIANTS = [
    pytest.param(("int8", "aten"), id="int8-aten"),
    pytest.param(("int8", "vnni"), id="int8-vnni", marks=NEEDS_NATIVE),
    pytest.param(("int4", "aten"), id="int4-aten"),
    pytest.param(("int4", "vnni"), id="int4-vnni", marks=NEEDS_NATIVE),
]
ATEN = [v for v in VARIANTS if v.values[0][1] == "aten"]


def weight(out_features: int = 96, in_features: int = 256, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=generator) / 16


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("rows", [1, 2, 7, 16])
def test_products_equal_the_dequantized_reference(variant, rows):
    kind, layout = variant
    w = weight()
    q = quantize_weight(w, kind, torch.bfloat16, layout=layout)
    assert q.kind == kind and q.layout == layout
    x = torch.randn(rows, w.shape[1], generator=torch.Generator().manual_seed(1)).bfloat16()
    reference = x.float() @ q.dequantized().t()  # [R, out]
    got = q.matmul(x).float()
    # bf16 accumulation/rounding of the output (and the native kernel's int8 activations,
    # half a step of amax / 127 each): ~1% of the output's scale.
    assert (got - reference).abs().max() <= 0.02 * reference.abs().max()


@pytest.mark.parametrize("variant", ATEN)
def test_many_rows_run_one_dense_product_of_the_int8_values(variant):
    kind, layout = variant
    w = weight()
    q = quantize_weight(w, kind, torch.bfloat16, layout=layout)
    int8 = q.wide or q
    assert int8.kind == "int8"
    x = torch.randn(MANY_ROWS + 5, w.shape[1], generator=torch.Generator().manual_seed(1))
    x = x.bfloat16()
    reference = x.float() @ int8.dequantized().t()
    got = q.matmul(x).float()
    assert (got - reference).abs().max() <= 0.02 * reference.abs().max()
    # ... the same weight the kernel multiplies a few rows by (int4: within its coarser steps).
    few = q.matmul(x[:4]).float()
    bound = 0.02 if kind == "int8" else 0.15
    assert (few - got[:4]).abs().max() <= bound * reference.abs().max()


@pytest.mark.parametrize("variant", VARIANTS)
def test_dequantized_weights_stay_close_to_the_original(variant):
    kind, layout = variant
    bound = 0.01 if kind == "int8" else 0.1
    w = weight()
    q = quantize_weight(w, kind, torch.bfloat16, layout=layout)
    error = (q.dequantized() - w).abs().max()
    assert 0 < error <= bound * w.abs().max()


def test_int8_scales_are_per_output_channel():
    w = weight()
    w[3] *= 100  # one loud channel must not coarsen the others
    q = quantize_weight(w, "int8", torch.float32)
    assert q.scales.shape == (w.shape[0],)
    quiet = (q.dequantized() - w)[torch.arange(w.shape[0]) != 3].abs().max()
    assert quiet <= w[torch.arange(w.shape[0]) != 3].abs().max() / 127


@pytest.mark.parametrize("variant", VARIANTS)
def test_concatenated_and_sliced_weights_compute_the_same(variant):
    kind, layout = variant
    parts = [
        quantize_weight(weight(n, seed=n), kind, torch.bfloat16, layout=layout)
        for n in (64, 32, 32)
    ]
    fused = concat(parts)
    x = torch.randn(3, 256).bfloat16()
    outs = fused.matmul(x)
    assert torch.equal(outs, torch.cat([p.matmul(x) for p in parts], dim=1))
    assert torch.equal(fused.rows(64, 96).matmul(x), parts[1].matmul(x))
    many = torch.randn(MANY_ROWS, 256).bfloat16()
    assert torch.equal(fused.matmul(many), torch.cat([p.matmul(many) for p in parts], dim=1))


def test_int4_needs_groups_that_divide_the_input():
    lm = tiny_causal_lm("llama", vocab_size=300, eos_id=0, pad_id=0)
    assert lm.config.hidden_size % INT4_GROUP != 0  # 64 inputs: too narrow for 128-groups
    with pytest.raises(ValueError, match="int4 needs input sizes divisible by 128"):
        quantize_model(lm, "int4")


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_a_quantized_model_still_runs_its_own_forward(arch):
    dense = tiny_causal_lm(arch, vocab_size=300, eos_id=0, pad_id=0).to(torch.bfloat16)
    ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        reference = dense(ids).logits.float()
    quantized = tiny_causal_lm(arch, vocab_size=300, eos_id=0, pad_id=0).to(torch.bfloat16)
    freed = quantize_model(quantized, "int8")
    assert freed > 0
    linears = [m for m in quantized.modules() if isinstance(m, QuantizedLinear)]
    assert len(linears) == 7 * quantized.config.num_hidden_layers + 1  # q k v o gate up down, head
    assert not any(type(m) is torch.nn.Linear for m in quantized.modules())
    with torch.no_grad():
        logits = quantized(ids).logits.float()
    assert not torch.equal(logits, reference)
    agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean()
    assert agree >= 0.9
    assert (logits - reference).abs().max() < 0.1 * reference.abs().max()


def test_a_tied_table_becomes_the_int8_head_and_looks_up_its_rows():
    lm = tiny_causal_lm("llama", vocab_size=300, eos_id=0, pad_id=0).to(torch.bfloat16)
    assert lm.config.tie_word_embeddings
    table = lm.get_input_embeddings().weight.detach().float().clone()
    quantize_model(lm, "int8")
    head, embedding = lm.get_output_embeddings(), lm.get_input_embeddings()
    assert isinstance(head, QuantizedLinear) and isinstance(embedding, QuantizedEmbedding)
    assert embedding.shared and embedding.quantized is head.quantized  # one copy of the table
    assert not lm.config.tie_word_embeddings
    ids = torch.tensor([[0, 5, 299, 5]])
    rows = embedding(ids).float()
    assert rows.shape == (1, 4, table.shape[1]) and embedding(ids).dtype == torch.bfloat16
    assert torch.equal(rows, head.quantized.dequantized()[ids].bfloat16().float())
    # int8 rows: within half a step (amax / 127 / 2) of the original, plus bf16 rounding.
    bound = table[ids].abs().amax(-1, keepdim=True) / 254 * 1.02 + 1e-3
    assert ((rows - table[ids]).abs() <= bound).all()


@NEEDS_NATIVE
def test_a_tied_table_looks_its_rows_up_in_a_vnni_head():
    lm = wide_model("llama", vocab_size=304, tied=True)  # 304 rows: whole tiles of 16
    table = lm.get_input_embeddings().weight.detach().float().clone()
    quantize_model(lm, "int4")
    head, embedding = lm.get_output_embeddings(), lm.get_input_embeddings()
    assert head.quantized.layout == "vnni" and head.quantized.kind == "int8"
    assert embedding.quantized is head.quantized
    ids = torch.tensor([[0, 17, 303, 17]])
    expected = (head.quantized.dequantized()[ids]).bfloat16()
    assert torch.equal(embedding(ids), expected)
    assert (embedding(ids).float() - table[ids]).abs().max() <= table.abs().max() / 100


def test_an_untied_table_gets_its_own_int8_rows():
    lm = tiny_causal_lm("llama", vocab_size=300, eos_id=0, pad_id=0).to(torch.bfloat16)
    lm.config.tie_word_embeddings = False
    head = lm.get_output_embeddings()
    head.weight = torch.nn.Parameter(head.weight.detach().clone() * 2)  # a table of its own
    table = lm.get_input_embeddings().weight.detach().float().clone()
    quantize_model(lm, "int8")
    embedding = lm.get_input_embeddings()
    assert isinstance(embedding, QuantizedEmbedding) and not embedding.shared
    assert embedding.quantized is not lm.get_output_embeddings().quantized
    ids = torch.arange(300)
    assert (embedding(ids).float() - table).abs().max() <= table.abs().max() / 100


def wide_model(arch: str = "qwen2", vocab_size: int = 300, tied: bool = False):
    """A tiny model whose products are wide enough for int4's 128-wide groups."""
    from tests.tiny_models import LLAMA_FAMILY, MODEL_CLASSES

    config_class, extra = LLAMA_FAMILY[arch]
    if "head_dim" in extra:
        extra = {**extra, "head_dim": 32}  # o_proj's input (heads x head_dim) must be 128
    extra = {**extra, "tie_word_embeddings": tied}
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        **extra,
    )
    torch.manual_seed(0)
    return MODEL_CLASSES[arch](config).eval().to(torch.bfloat16)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_the_fused_trunk_runs_quantized_weights_like_the_models_forward(variant, arch):
    kind, layout = variant
    model = wide_model(arch)
    quantize_model(model, kind, layout=layout)
    ids = torch.randint(0, 300, (1, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reference = model(ids).logits[0].float()  # [S, V] through QuantizedLinear modules
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk)
    assert isinstance(trunk.head, QuantizedProduct) and not trunk.timed_kernels
    assert isinstance(trunk.layers[0].qkv, QuantizedProduct)
    # Same weights, bf16 rounding apart: a whole prompt at once, then token by token.
    torch.testing.assert_close(
        trunk.logits(trunk(ids, new_cache(model))), reference, rtol=0.02, atol=0.02
    )
    cache = new_cache(model)
    trunk(ids[:, :10], cache)
    steps = torch.cat([trunk.logits(trunk(ids[:, i : i + 1], cache)) for i in range(10, 20)])
    torch.testing.assert_close(steps, reference[10:], rtol=0.02, atol=0.02)


def test_fusing_int8_qkv_leaves_the_modules_as_views():
    model = wide_model("qwen2")
    quantize_model(model, "int8")
    prepare_trunk(model)
    attn = model.model.layers[0].self_attn
    fused = prepare_trunk(model).layers[0].qkv.weight.data
    assert attn.q_proj.quantized.data.data_ptr() == fused.data_ptr()
    # q's values come first, one int8 byte each, whichever layout: k's start right after.
    q_bytes = attn.q_proj.out_features * attn.q_proj.in_features
    assert attn.k_proj.quantized.data.data_ptr() == fused.data_ptr() + q_bytes


@pytest.mark.parametrize("variant", VARIANTS)
def test_speculative_decoding_of_a_quantized_model_stays_close_to_its_plain_greedy(variant):
    """bf16 / int8 / int4: a k-token pass rounds differently from a one-token pass, so the two
    may part now and then; on a tiny random model they agree on nearly every prompt."""
    from memosight_lsp.inference.decoder import StopRules
    from memosight_lsp.inference.drafters import CostModel
    from memosight_lsp.inference.greedy import greedy_generate
    from memosight_lsp.inference.speculative import SpeculativeDecoder, default_sources

    kind, layout = variant
    model = wide_model("qwen2")
    quantize_model(model, kind, layout=layout)
    rules = StopRules(max_new_tokens=24)
    decoder = SpeculativeDecoder(
        sources=default_sources(heads=None, ngrams=None),
        cost_model=CostModel({1: 1.0, 16: 1.0, 32: 2.0}),
    )
    generator = torch.Generator().manual_seed(5)
    same = drafted = 0
    for _ in range(12):
        # Repetitive prompts, so prompt lookup drafts and the tree walk really runs.
        block = torch.randint(3, 300, (8,), generator=generator).tolist()
        prompt = block * 4
        plain = greedy_generate(model, prompt, rules)
        fast = decoder(model, prompt, rules)
        same += fast.tokens == plain.tokens
        drafted += fast.stats["acceptedDraftTokens"]
    assert drafted > 0
    assert same >= 10
