"""FusedTrunk must compute what transformers' own forward computes, for every model it accepts."""

from __future__ import annotations

import time

import pytest
import torch
from tiny_models import LLAMA_FAMILY, LLAMA_FAMILY_SHAPE, MODEL_CLASSES
from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

from memosight_lsp.inference.fused_trunk import (
    FusedTrunk,
    HFTrunk,
    fused_unsupported_reason,
    prepare_trunk,
)
from memosight_lsp.inference.kv_cache import new_cache
from memosight_lsp.inference.row_kernels import (
    COPY,
    FEW_ROWS,
    LINEAR,
    TRANSPOSED,
    Product,
    RowKernels,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SHAPE = {**LLAMA_FAMILY_SHAPE, "vocab_size": 300}


def build(name: str):
    """The test suite's tiny Llama-family model; Llama with attention and MLP biases."""
    torch.manual_seed(0)
    config_class, extra = LLAMA_FAMILY[name]
    if name == "llama":
        extra = {**extra, "attention_bias": True, "mlp_bias": True}
    return MODEL_CLASSES[name](config_class(**SHAPE, **extra))


def hf_hidden(model, ids, cache, positions=None, mask=None):
    return HFTrunk(model)(ids, cache, positions=positions, mask=mask)


@pytest.mark.parametrize("kernel", [LINEAR, TRANSPOSED, COPY])
@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "qwen3"])
def test_fused_trunk_matches_transformers(name, kernel):
    """Every row kernel for a few rows (row_kernels) gives transformers' numbers."""
    model = build(name).eval()
    assert fused_unsupported_reason(model) is None
    reference = build(name).eval()  # same seed, never fused
    fused = prepare_trunk(model)
    assert isinstance(fused, FusedTrunk)
    fused.kernels = RowKernels.fixed(kernel)
    ids = torch.randint(
        0, SHAPE["vocab_size"], (1, 130), generator=torch.Generator().manual_seed(1)
    )
    ours, theirs = new_cache(model), new_cache(reference)

    def same(got: torch.Tensor, want: torch.Tensor) -> None:
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    # Prefill with no past (causal), a chain on top of a past, then one token.
    same(fused(ids[:, :40], ours), hf_hidden(reference, ids[:, :40], theirs))
    same(fused(ids[:, 40:45], ours), hf_hidden(reference, ids[:, 40:45], theirs))
    same(fused(ids[:, 45:46], ours), hf_hidden(reference, ids[:, 45:46], theirs))
    # A draft tree: two branches off the root, explicit positions and mask.
    past = 46
    positions = torch.tensor([past, past + 1, past + 2, past + 1])
    mask = torch.ones(4, past + 4, dtype=torch.bool)
    mask[:, past:] = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool
    )
    tree = ids[:, 46:50]
    same(
        fused(tree, ours, positions=positions, mask=mask),
        hf_hidden(reference, tree, theirs, positions=positions, mask=mask),
    )
    # More rows than FEW_ROWS (a long prefill) on top of a past.
    long = ids[:, 50 : 50 + FEW_ROWS + 6]
    same(fused(long, ours), hf_hidden(reference, long, theirs))
    # The caches agree too, and the model's own forward still works on the fused weights.
    for mine, ref in zip(ours.layers, theirs.layers, strict=True):
        same(mine.keys, ref.keys)
        same(mine.values, ref.values)
    with torch.inference_mode():
        same(model(ids).logits, reference(ids).logits)


def test_fused_weights_are_shared_with_the_model():
    model = build("qwen2").eval()
    before = sum(p.numel() for p in model.parameters())
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk)
    attention = model.model.layers[0].self_attn
    layer = trunk.layers[0]
    assert attention.q_proj.weight.data_ptr() == layer.qkv.weight.data_ptr()
    assert attention.k_proj.bias is not None and layer.qkv.bias is not None
    assert attention.k_proj.bias.data_ptr() > layer.qkv.bias.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == before
    assert prepare_trunk(model) is trunk  # built once per model


def test_row_kernels_are_timed_once_and_unused_copies_freed():
    model = build("llama").eval()
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk) and trunk.kernels is None
    assert all(product.copy is not None for product in trunk._products())
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 8))
    trunk(ids, new_cache(model))  # a few rows: the kernels are timed now
    kernels = trunk.kernels
    assert kernels is not None and kernels.threads == torch.get_num_threads()
    copies = [product.copy is not None for product in trunk._products()]
    assert all(copies) == (COPY in kernels.chosen) and len(set(copies)) == 1
    trunk(ids, new_cache(model))
    assert trunk.kernels is kernels  # timed once
    # Under another thread count (a busy machine: inference/core_share.py) few rows take F.linear
    # rather than a timing inside the request; the choice stays for when the count is back.
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        trunk(ids, new_cache(model))
        assert trunk.kernels is kernels
        assert all(trunk._kernel(rows) == LINEAR for rows in range(1, 9))
    finally:
        torch.set_num_threads(before)
    assert [trunk._kernel(rows) for rows in range(1, 9)] == [kernels.kernel(r) for r in range(1, 9)]


@pytest.mark.parametrize("kernel", [TRANSPOSED, COPY])
def test_weights_edited_in_place_after_fusing_are_used(kernel):
    """Tests and training edit a model's weights in place: the copies COPY keeps follow."""
    model = build("llama").eval()
    reference = build("llama").eval()
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk)
    trunk.kernels = RowKernels.fixed(kernel)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 6))
    trunk(ids, new_cache(model))  # copies made and used before the edit
    with torch.no_grad():
        for m in (model, reference):
            m.model.layers[0].self_attn.v_proj.weight.mul_(3.0)
            m.model.layers[0].mlp.down_proj.weight.add_(0.5)
            m.get_output_embeddings().weight.mul_(-1.0)
    hidden = trunk(ids, new_cache(model))
    want = hf_hidden(reference, ids, new_cache(reference))
    torch.testing.assert_close(hidden, want, rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        want_logits = reference.get_output_embeddings()(want)
    torch.testing.assert_close(trunk.logits(hidden), want_logits, rtol=1e-5, atol=1e-5)


def test_row_kernels_choose_the_fastest_kernel_for_each_row_count():
    """A pass whose TRANSPOSED kernel is slow over up to 4 rows and COPY slow above 4."""
    delay = {(True, LINEAR): 0.002, (False, LINEAR): 0.002, (True, TRANSPOSED): 0.004}
    delay |= {(False, TRANSPOSED): 0.0, (True, COPY): 0.001, (False, COPY): 0.006}

    def run(rows: int, kernel: int) -> None:
        time.sleep(delay[rows <= 4, kernel])

    kernels = RowKernels.timed(run, [LINEAR, TRANSPOSED, COPY], repeats=2)
    assert kernels.chosen[1:5] == (COPY,) * 4
    assert kernels.chosen[5:] == (TRANSPOSED,) * (FEW_ROWS - 4)
    assert kernels.kernel(FEW_ROWS + 1) == LINEAR  # prefills
    assert RowKernels.timed(run, [LINEAR], repeats=1).chosen[1:] == (LINEAR,) * FEW_ROWS


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=100)), "family"),
        (MistralForCausalLM(MistralConfig(**SHAPE, sliding_window=16)), "sliding"),
    ],
)
def test_other_models_use_transformers_forward(model, reason):
    assert reason in (fused_unsupported_reason(model) or "")
    trunk = prepare_trunk(model.eval())
    assert isinstance(trunk, HFTrunk)
    ids = torch.randint(0, 100, (1, 12))
    hidden = trunk(ids, new_cache(model))
    assert hidden.shape == (12, model.config.hidden_size)


@pytest.mark.parametrize("kernel", [LINEAR, TRANSPOSED, COPY])
@pytest.mark.parametrize("rows", [1, 2, 5, FEW_ROWS, FEW_ROWS + 1, 300])
def test_logits_match_the_models_lm_head(rows, kernel):
    """Every row count, each row kernel (TRANSPOSED pads one row to two)."""
    model = build("llama").eval()
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk) and isinstance(trunk.head, Product)
    trunk.kernels = RowKernels.fixed(kernel)
    hidden = torch.randn(rows, SHAPE["hidden_size"])
    with torch.inference_mode():
        want = model.get_output_embeddings()(hidden)
    torch.testing.assert_close(trunk.logits(hidden), want, rtol=1e-5, atol=1e-5)


def test_half_precision_runs_and_stays_close():
    """bf16 (a GPU default): same code path, agreement only to bf16 rounding."""
    model = build("qwen3").eval().to(torch.bfloat16)
    reference = build("qwen3").eval().to(torch.bfloat16)
    trunk = prepare_trunk(model)
    assert isinstance(trunk, FusedTrunk)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 30), generator=torch.Generator().manual_seed(2))
    ours, theirs = new_cache(model), new_cache(reference)
    hidden = trunk(ids, ours)
    assert hidden.dtype == torch.bfloat16
    torch.testing.assert_close(hidden, hf_hidden(reference, ids, theirs), rtol=0.05, atol=0.05)
    step = trunk(ids[:, :1], ours)
    logits = trunk.logits(step)
    assert logits.dtype == torch.float32 and logits.shape == (1, SHAPE["vocab_size"])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_half_precision_passes_equal_one_token_steps_bitwise(arch):
    """In bf16 a pass over k tokens must give what k one-token steps give, to the bit: that
    is what keeps speculative decoding identical to plain greedy decoding there."""
    model = build(arch).eval().to(torch.bfloat16)
    trunk = prepare_trunk(model)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(4))
    stepped, batched = new_cache(model), new_cache(model)
    trunk(ids[:, :30], stepped)
    trunk(ids[:, :30], batched)
    steps = torch.cat([trunk(ids[:, i : i + 1], stepped) for i in range(30, 40)])
    assert torch.equal(trunk(ids[:, 30:40], batched), steps)  # a chain


def test_a_half_precision_tree_node_sees_what_its_one_token_step_sees():
    """A node on a second branch attends to the past and its own ancestors only."""
    model = build("qwen2").eval().to(torch.bfloat16)
    trunk = prepare_trunk(model)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 24), generator=torch.Generator().manual_seed(6))
    past = 20
    # Tree over [root, a, b, c]: a and b are children of the root, c a child of b.
    nodes = torch.tensor([[ids[0, past], 7, 9, 11]])
    parents = [0, 0, 2]  # of a, b, c (input indices)
    mask = torch.zeros(4, past + 4, dtype=torch.bool)
    mask[:, :past] = True
    for i in range(4):
        mask[i, past + i] = True
        j = i
        while j:
            j = parents[j - 1]
            mask[i, past + j] = True
    positions = torch.tensor([past, past + 1, past + 1, past + 2])
    tree_cache = new_cache(model)
    trunk(ids[:, :past], tree_cache)
    tree = trunk(nodes, tree_cache, positions=positions, mask=mask)
    # The path root -> b -> c, one token at a time.
    path_cache = new_cache(model)
    trunk(ids[:, :past], path_cache)
    steps = [trunk(nodes[:, i : i + 1], path_cache) for i in (0, 2, 3)]
    assert torch.equal(tree[0], steps[0][0])
    assert torch.equal(tree[2], steps[1][0])
    assert torch.equal(tree[3], steps[2][0])
