"""The "vnni" weight layouts the native kernels multiply (inference/native/*_vnni.cpp).

Output channels come in tiles of TILE; within a tile, one 64-byte vector covers the 16 outputs
for a few input channels, byte 4 * o + j for output o, as VPDPBUSD multiplies lane by lane:
- int8: 4 inputs a vector (byte 4 * o + j: input 4p + j);
- int4: 8 inputs a vector, two per byte (low nibble: input 8p + j, high: input 8p + 4 + j).
Per-group numbers (GROUP inputs) are kept per tile too, so a tile's kernel reads one stretch.
"""

from __future__ import annotations

import torch

TILE = 16  # output channels per tile
GROUP = 128  # shapes come in whole groups of this many input channels
# Input channels per activation scale in the kernels (native/simd.h ACT_GROUP), and so per int4
# scale and minimum and per int8 weight sum.
ACT_GROUP = 32


def fits(out_features: int, in_features: int) -> bool:
    """Whether a weight of this shape can take the layout."""
    return out_features % TILE == 0 and in_features % GROUP == 0


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[out, in] values 0..15 -> uint8 [out / 16, in / 8, 64]."""
    out_features, in_features = values.shape
    v = values.to(torch.uint8).reshape(out_features // TILE, TILE, in_features // 8, 2, 4)
    packed = v[:, :, :, 0, :] | (v[:, :, :, 1, :] << 4)  # [tiles, 16, in / 8, 4]
    return packed.permute(0, 2, 1, 3).reshape(out_features // TILE, in_features // 8, 64)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_int4: [out, in] int32 values 0..15."""
    tiles, vectors, _ = packed.shape
    p = packed.reshape(tiles, vectors, TILE, 4).permute(0, 2, 1, 3)  # [tiles, 16, in / 8, 4]
    values = torch.stack((p & 0x0F, p >> 4), dim=3)  # [tiles, 16, in / 8, 2, 4]
    return values.reshape(tiles * TILE, vectors * 8).to(torch.int32)


def pack_group_pairs(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Two [out, groups] tables (int4 scales and minimums) -> float32 [out / 16, groups, 2, 16]."""
    out_features, groups = first.shape
    both = torch.stack((first, second), dim=1).float()  # [out, 2, groups]
    return both.reshape(out_features // TILE, TILE, 2, groups).permute(0, 3, 2, 1).contiguous()


def unpack_group_pairs(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of pack_group_pairs: two [out, groups] tables."""
    tiles, groups, _, _ = packed.shape
    flat = packed.permute(0, 3, 2, 1).reshape(tiles * TILE, 2, groups)
    return flat[:, 0], flat[:, 1]


def pack_int8(values: torch.Tensor) -> torch.Tensor:
    """[out, in] int8 -> int8 [out / 16, in / 4, 64]."""
    out_features, in_features = values.shape
    v = values.reshape(out_features // TILE, TILE, in_features // 4, 4)
    return v.permute(0, 2, 1, 3).reshape(out_features // TILE, in_features // 4, 64).contiguous()


def unpack_int8(packed: torch.Tensor) -> torch.Tensor:
    """The inverse of pack_int8: [out, in] int8."""
    tiles, vectors, _ = packed.shape
    return (
        packed.reshape(tiles, vectors, TILE, 4)
        .permute(0, 2, 1, 3)
        .reshape(tiles * TILE, vectors * 4)
    )


def int8_rows(packed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Output channels `ids` (any shape) of a packed int8 weight as [..., in] int8 rows: an
    embedding table that is a tied model's LM head looks its rows up here."""
    tiles, vectors, _ = packed.shape
    view = packed.view(tiles, vectors, TILE, 4)
    flat = ids.reshape(-1)
    rows = view[flat // TILE, :, flat % TILE, :]  # [n, in / 4, 4]
    return rows.reshape(*ids.shape, vectors * 4)


def int8_group_sums(values: torch.Tensor) -> torch.Tensor:
    """Sums of each output's int8 values per group: int32 [out / 16, in / 32, 16] (the kernel
    takes 128 x this off, for activations shifted to unsigned bytes)."""
    out_features, in_features = values.shape
    groups = values.to(torch.int32).reshape(out_features, in_features // ACT_GROUP, ACT_GROUP)
    sums = groups.sum(-1, dtype=torch.int32)
    return sums.reshape(out_features // TILE, TILE, -1).permute(0, 2, 1).contiguous()
