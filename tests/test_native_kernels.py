"""The native int4 kernel (engine/native.py): built on machines that can run it, and exact where
lossless speculative decoding needs it to be (each row's bits do not depend on the others)."""

from __future__ import annotations

import pytest
import torch

from memosight_lsp.engine import native
from memosight_lsp.engine.quantize import MANY_ROWS, native_layout, quantize_weight
from memosight_lsp.engine.vnni_layout import pack_int4, unpack_int4

pytestmark = pytest.mark.skipif(
    native.unsupported_reason() is not None,
    reason=f"native kernels cannot run here: {native.unsupported_reason()}",
)


def weight(out_features: int = 160, in_features: int = 384, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=generator) / 16


def rows(count: int, width: int = 384, seed: int = 1, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(count, width, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_a_machine_that_can_run_them_builds_them():
    # The CPU has the instructions: a missing compiler or a build error is a failure here.
    assert native.kernels() is not None
    assert native_layout() == "vnni"


def test_packing_round_trips():
    values = torch.randint(0, 16, (48, 256), generator=torch.Generator().manual_seed(0))
    packed = pack_int4(values)
    assert packed.shape == (3, 32, 64) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed), values.to(torch.int32))
    # Byte 4 * o + j of a tile's first vector: input j (low nibble), input 4 + j (high nibble).
    assert packed[0, 0, 4 * 5 + 2] == values[5, 2] | (values[5, 6] << 4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_each_row_gets_the_same_bits_whatever_the_rows_beside_it(dtype):
    q = quantize_weight(weight(), "int4", torch.bfloat16, layout="vnni")
    x = rows(MANY_ROWS - 1, dtype=dtype)  # every row block, partial blocks included
    together = q.matmul(x)
    assert together.dtype == dtype
    alone = torch.cat([q.matmul(x[i : i + 1]) for i in range(x.shape[0])])
    assert torch.equal(together, alone)
    for count in (2, 5, 8, 9, 17):
        assert torch.equal(q.matmul(x[:count]), together[:count])


def test_the_thread_count_does_not_change_the_bits():
    q = quantize_weight(weight(out_features=512), "int4", torch.bfloat16, layout="vnni")
    x = rows(12)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = q.matmul(x)
        torch.set_num_threads(2)
        two = q.matmul(x)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)


def test_products_follow_the_dequantized_weights_within_int8_activation_steps():
    w = weight()
    q = quantize_weight(w, "int4", torch.bfloat16, layout="vnni")
    x = rows(6, dtype=torch.float32)
    got = q.matmul(x)
    reference = x @ q.dequantized().t()
    # Each activation is off by at most half a step (amax / 254 of its group of 128).
    steps = x.abs().reshape(6, -1, 128).amax(-1) / 254  # [R, groups]
    bound = steps[:, :, None] * q.dequantized().abs().reshape(160, -1, 128).sum(-1).t()[None]
    assert ((got - reference).abs() <= bound.sum(1) * 1.01 + 1e-4).all()
    assert not torch.equal(got, reference)  # activations really are quantized


def test_a_zero_row_gives_zeros_and_mismatched_shapes_are_refused():
    q = quantize_weight(weight(), "int4", torch.bfloat16, layout="vnni")
    kernels = native.kernels()
    assert kernels is not None
    zero = torch.zeros(1, 384, dtype=torch.bfloat16)
    expected = torch.zeros(1, 160, dtype=torch.bfloat16)
    assert torch.equal(kernels.int4_matmul(zero, q.data, q.scales), expected)
    with pytest.raises(RuntimeError, match="does not match"):
        kernels.int4_matmul(rows(1, width=256), q.data, q.scales)


def test_the_switch_turns_them_off(monkeypatch):
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native.unsupported_reason() == f"{native.ENV_SWITCH}=0"
