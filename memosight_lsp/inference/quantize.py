"""Weight-only int8 / int4 linear layers: decoding a real model on a CPU is bound by reading the
weights, so fewer bytes per weight is fewer milliseconds per token.

- int8: one scale per output channel (symmetric, amax / 127).
- int4: asymmetric groups of input channels (a scale and a zero per group; INT4_GROUP for torch's
  kernels, vnni_layout.ACT_GROUP for the native ones), two per byte; the LM head stays int8.

Two layouts. "vnni", where the project's own kernels run (inference/native_kernels.py; AVX-512
VNNI): weights in tiles (inference/vnni_layout.py), activations quantized to int8 per group of
32 inside the product, whose cost barely grows from 1 to 8 rows and which beats a dense product at
prefill sizes too. Elsewhere "aten": torch's `_weight_int8pack_mm` / `_weight_int4pack_mm_for_cpu`
with bfloat16 activations. Those are made for decoding: their cost grows with every row (figures:
docs/speculative.md), so from MANY_ROWS rows an "aten" product converts the int8 values to the
activations' dtype and runs one dense product: int8 weights as they are, int4 ones from an int8
copy of the same weight (1.5 bytes a weight in all).

`quantize_model` swaps the decoder's nn.Linear modules (and the LM head) for QuantizedLinear in
place, freeing each dense weight as it goes, so the model's own forward keeps working and the
fused trunk can take the quantized weights as they are. The embedding table becomes int8 rows
with a scale each (QuantizedEmbedding): a lookup reads one row, so speed does not ask for it,
but memory does (Qwen2.5-Coder-0.5B's table is 272 MB in bfloat16), and a tied model's table is
its LM head, whose int8 weight it then shares. Norms stay dense.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from . import native_kernels, vnni_layout

# "gguf": each weight int8 or int4 as its GGUF file stored it (inference/gguf.py, mixed_plan)
Quantization = Literal["none", "int8", "int4", "gguf"]
Kind = Literal["int8", "int4"]
Layout = Literal["aten", "vnni"]
INT4_GROUP = 128  # input channels per int4 scale/zero (what torchao uses on CPU by default)
INT4_INNER_K_TILES = 2  # the CPU packing's tile size (in_features must divide by 16 * this)
# From here on "aten" products run dense. The kernels lose to a dense product below this, but a
# verification pass (up to 33 rows) must run the kernel a one-token step runs, for the same bits.
MANY_ROWS = 64
CHUNK_ROWS = 4096  # output channels quantized at a time (bounds the float32 temporaries)


def native_layout() -> Layout:
    """The layout this machine multiplies fastest: "vnni" where the native kernels run."""
    return "vnni" if native_kernels.kernels() is not None else "aten"


def layout_for(out_features: int, in_features: int) -> Layout:
    """The layout a weight of this shape gets here."""
    fits = vnni_layout.fits(out_features, in_features)
    return native_layout() if fits else "aten"


@dataclass(frozen=True, kw_only=True)
class Int4Grid:
    """A 4-bit weight as a file stores it: w = values * scales + minimums per group of
    vnni_layout.ACT_GROUP inputs (what the "vnni" int4 layout holds, so it is taken as is)."""

    values: torch.Tensor  # [out, in] integers 0..15
    scales: torch.Tensor  # float32 [out, in / ACT_GROUP]
    minimums: torch.Tensor  # float32 [out, in / ACT_GROUP]

    def dequantized(self) -> torch.Tensor:
        """The float32 [out, in] weight."""
        out_features, in_features = self.values.shape
        groups = self.values.float().reshape(out_features, self.scales.shape[1], -1)
        weight = groups * self.scales[..., None] + self.minimums[..., None]
        return weight.reshape(out_features, in_features)


@dataclass(frozen=True, kw_only=True)
class MixedPlan:
    """Quantization "gguf": the kind of each weight (by parameter name, e.g.
    "model.layers.0.mlp.down_proj.weight"), and for int4 ones the file's own grid where it
    has one (`grid(name)`, None: fitted here as for "int4")."""

    kinds: dict[str, Kind]
    grid: Callable[[str], Int4Grid | None]


@dataclass(frozen=True, kw_only=True)
class QuantizedWeight:
    """A quantized [out, in] weight and what its kernel needs to multiply by it."""

    kind: Literal["int8", "int4"]
    layout: Layout = "aten"
    # "aten": int8 [out, in], or int4 packed for torch's kernel; "vnni": vnni_layout's tiles
    data: torch.Tensor
    # int8: [out] (the activations' dtype; "vnni": float32); int4 "aten": scales and zeros
    # [in / group, out, 2] in the activations' dtype; int4 "vnni": float32 scales and minimums
    # [out / 16, in / group, 2, 16]
    scales: torch.Tensor
    out_features: int
    in_features: int
    sums: torch.Tensor | None = None  # int8 "vnni": vnni_layout.int8_group_sums
    wide: QuantizedWeight | None = None  # int4 "aten": the int8 form many-row products use

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """[R, in] -> [R, out] in the activations' dtype."""
        if self.layout == "vnni":
            kernels = native_kernels.kernels()
            if kernels is None:
                raise RuntimeError("weights in the vnni layout need the native kernels")
            if self.kind == "int4":
                return kernels.int4_matmul(x, self.data, self.scales)
            return kernels.int8_matmul(x, self.data, self.sums, self.scales)
        if x.shape[0] >= MANY_ROWS:
            int8 = self.wide or self
            return F.linear(x, int8.data.to(x.dtype)) * int8.scales  # (x @ q^T) * s == x @ w^T
        if self.kind == "int8":
            return torch.ops.aten._weight_int8pack_mm(x, self.data, self.scales)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.data, INT4_GROUP, self.scales)

    def dequantized(self) -> torch.Tensor:
        """The fp32 [out, in] weight the products compute with (reference for tests)."""
        if self.kind == "int8":
            return self.int8_values().float() * self.scales.float()[:, None]
        if self.layout == "vnni":
            values = vnni_layout.unpack_int4(self.data).float()
            scales, minimums = vnni_layout.unpack_group_pairs(self.scales)  # [out, groups]
            groups = values.reshape(self.out_features, scales.shape[1], -1)
            weight = groups * scales[..., None] + minimums[..., None]
            return weight.reshape(self.out_features, self.in_features)
        unpacked = _unpack_int4(self.data, self.out_features, self.in_features)
        groups = unpacked.reshape(self.out_features, -1, INT4_GROUP).float()
        scales = self.scales[..., 0].t().float()[..., None]  # [out, groups, 1]
        zeros = self.scales[..., 1].t().float()[..., None]
        return ((groups - 8) * scales + zeros).reshape(self.out_features, self.in_features)

    def int8_values(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """An int8 weight's values as [out, in] rows (only the rows `ids`, shaped like them)."""
        if self.layout == "vnni":
            if ids is None:
                return vnni_layout.unpack_int8(self.data)
            return vnni_layout.int8_rows(self.data, ids)
        return self.data if ids is None else self.data[ids]

    def rows(self, start: int, end: int) -> QuantizedWeight:
        """Output channels start..end (int8 and "vnni": views; torch's int4 packing: repacked)."""
        if self.layout == "vnni":
            if start % vnni_layout.TILE or end % vnni_layout.TILE:
                raise ValueError("vnni weights are sliced in whole tiles of 16 rows")
            tiles = slice(start // vnni_layout.TILE, end // vnni_layout.TILE)
            if self.kind == "int8":
                data, scales = self.data[tiles], self.scales[start:end]
                sums = self.sums[tiles] if self.sums is not None else None
                return replace(self, data=data, scales=scales, sums=sums, out_features=end - start)
            data, scales = self.data[tiles], self.scales[tiles]
        elif self.kind == "int8":
            data, scales = self.data[start:end], self.scales[start:end]
        else:
            values = _unpack_int4(self.data, self.out_features, self.in_features)
            data, scales = _pack_int4(values[start:end]), self.scales[:, start:end].contiguous()
        wide = self.wide.rows(start, end) if self.wide is not None else None
        return replace(self, data=data, scales=scales, out_features=end - start, wide=wide)

    def nbytes(self) -> int:
        own = sum(
            t.numel() * t.element_size()
            for t in (self.data, self.scales, self.sums)
            if t is not None
        )
        return own + (self.wide.nbytes() if self.wide is not None else 0)


def quantize_weight(
    weight: torch.Tensor,
    kind: Kind,
    dtype: torch.dtype,
    layout: Layout | None = None,
    grid: Int4Grid | None = None,
):
    """Quantize a dense [out, in] weight; scales in the activations' `dtype` ("vnni": float32).
    `layout`: default layout_for(its shape). `grid`: an int4 weight's values as its file holds
    them, taken as they are where the layout's groups are the grid's ("vnni"); elsewhere the
    groups are fitted to `weight`. Works through CHUNK_ROWS output channels at a time: the
    float32 temporaries of a whole LM head would be ~2 GB for a 150k vocabulary."""
    out_features, in_features = weight.shape
    native_dtype = dtype in (torch.bfloat16, torch.float32)  # what the native kernels take
    layout = layout or (layout_for(out_features, in_features) if native_dtype else "aten")
    if kind == "int4" and layout == "vnni" and grid is not None:
        group_count = in_features // vnni_layout.ACT_GROUP
        if grid.values.shape != weight.shape or grid.scales.shape != (out_features, group_count):
            raise ValueError(
                f"an int4 grid of {tuple(grid.values.shape)} for {tuple(weight.shape)}"
            )
        return QuantizedWeight(
            kind="int4",
            layout="vnni",
            data=vnni_layout.pack_int4(grid.values),
            scales=vnni_layout.pack_group_pairs(grid.scales, grid.minimums),
            out_features=out_features,
            in_features=in_features,
        )
    group = vnni_layout.ACT_GROUP if layout == "vnni" else INT4_GROUP
    int8 = torch.empty(out_features, in_features, dtype=torch.int8)
    int8_scales = torch.empty(out_features)
    if kind == "int4":
        int4 = torch.empty(out_features, in_features, dtype=torch.int32)
        groups_scales = torch.empty(out_features, in_features // group)
        groups_zeros = torch.empty_like(groups_scales)
    for start in range(0, out_features, CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        w = weight[rows].detach().float()  # [chunk, in]
        int8_scales[rows] = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)
        int8[rows] = (w / int8_scales[rows, None]).round().clamp(-128, 127)
        if kind == "int4":
            groups = w.reshape(w.shape[0], -1, group)  # [chunk, in / group, group]
            low, high = groups.amin(dim=-1), groups.amax(dim=-1)
            scales = ((high - low) / 15).clamp(min=1e-12)
            groups_scales[rows] = scales
            groups_zeros[rows] = low + scales * 8  # the kernel computes (q - 8) * scale + zero
            q = ((groups - low[..., None]) / scales[..., None]).round().clamp(0, 15)
            int4[rows] = q.reshape(w.shape)
    if kind == "int8" and layout == "vnni":
        return QuantizedWeight(
            kind="int8",
            layout="vnni",
            data=vnni_layout.pack_int8(int8),
            scales=int8_scales,
            sums=vnni_layout.int8_group_sums(int8),
            out_features=out_features,
            in_features=in_features,
        )
    wide = QuantizedWeight(
        kind="int8",
        data=int8,
        scales=int8_scales.to(dtype),
        out_features=out_features,
        in_features=in_features,
    )
    if kind == "int8":
        return wide
    if layout == "vnni":
        # The kernel computes q * scale + minimum: the minimum is zero - 8 * scale.
        minimums = groups_zeros - groups_scales * 8
        return QuantizedWeight(
            kind="int4",
            layout="vnni",
            data=vnni_layout.pack_int4(int4),
            scales=vnni_layout.pack_group_pairs(groups_scales, minimums),
            out_features=out_features,
            in_features=in_features,
        )
    scales_and_zeros = torch.stack((groups_scales.t(), groups_zeros.t()), dim=-1)
    return QuantizedWeight(
        kind="int4",
        data=_pack_int4(int4),
        scales=scales_and_zeros.to(torch.bfloat16).contiguous(),  # [in / group, out, 2]
        wide=wide,
        out_features=out_features,
        in_features=in_features,
    )


def concat(weights: list[QuantizedWeight]) -> QuantizedWeight:
    """One weight for several products over the same input (fused q/k/v), all of one layout."""
    first = weights[0]
    if any(w.layout != first.layout for w in weights):
        raise ValueError("fused weights must share a layout")
    sums = None
    if first.kind == "int8" or first.layout == "vnni":  # rows, or whole tiles of rows
        data = torch.cat([w.data for w in weights])
        scales = torch.cat([w.scales for w in weights])
        if first.sums is not None:
            sums = torch.cat([w.sums for w in weights if w.sums is not None])
    else:  # torch's int4 packing tiles output channels: concatenate the values, pack again
        values = [_unpack_int4(w.data, w.out_features, w.in_features) for w in weights]
        data = _pack_int4(torch.cat(values))
        scales = torch.cat([w.scales for w in weights], dim=1).contiguous()
    wides = [w.wide for w in weights if w.wide is not None]
    wide = concat(wides) if len(wides) == len(weights) else None
    out_features = sum(w.out_features for w in weights)
    return replace(first, data=data, scales=scales, sums=sums, out_features=out_features, wide=wide)


def _pack_int4(values: torch.Tensor) -> torch.Tensor:
    """[out, in] int32 values 0..15 -> the CPU kernel's packed uint8 layout."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, INT4_INNER_K_TILES)


def _unpack_int4(packed: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """The 0..15 values of a CPU-packed int4 weight, by multiplying it by the identity."""
    eye = torch.eye(in_features, dtype=torch.bfloat16)
    group = in_features // INT4_GROUP
    ones = torch.zeros(group, out_features, 2, dtype=torch.bfloat16)
    ones[..., 0] = 1  # scale 1, zero 8: the product gives back q
    ones[..., 1] = 8
    values = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, packed, INT4_GROUP, ones)
    return values.t().round().to(torch.int32)  # [out, in]


def weight_fingerprint(weight: torch.Tensor) -> str:
    """A short hash of a strided sample of a dense weight, rounded to bfloat16 first so that a
    model loaded in float32 or bfloat16 from the same files hashes alike."""
    sample = weight.detach().flatten()[:: max(1, weight.numel() // 65536)]
    sample = sample.to(torch.bfloat16).float().cpu().contiguous()
    digest = hashlib.sha256(sample.numpy().tobytes())
    digest.update(str(tuple(weight.shape)).encode())
    return digest.hexdigest()[:16]


class QuantizedLinear(nn.Module):
    """nn.Linear's interface over a QuantizedWeight (so the model's own forward still runs)."""

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None, fingerprint: str):
        super().__init__()
        self.quantized = weight
        self.dense_fingerprint = fingerprint  # weight_fingerprint of the weight it replaced
        self.in_features = weight.in_features
        self.out_features = weight.out_features
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)  # [R, in]
        out = self.quantized.matmul(flat)
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        kind = self.quantized.kind
        return f"in_features={self.in_features}, out_features={self.out_features}, {kind}"


class QuantizedEmbedding(nn.Module):
    """nn.Embedding's lookup over int8 rows with one scale per row (a row of an int8 LM head is
    exactly that: one scale per output channel)."""

    def __init__(self, weight: QuantizedWeight, dtype: torch.dtype, *, shared: bool) -> None:
        super().__init__()
        if weight.kind != "int8":
            raise ValueError("an embedding table is quantized as int8 rows")
        self.quantized = weight
        self.dtype = dtype
        self.shared = shared  # the LM head's own weight (a tied model): stored once
        self.num_embeddings = weight.out_features
        self.embedding_dim = weight.in_features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.quantized.int8_values(ids).float()  # [..., dim]
        return (rows * self.quantized.scales[ids].unsqueeze(-1).float()).to(self.dtype)

    def extra_repr(self) -> str:
        shared = ", shared with the LM head" if self.shared else ""
        return f"{self.num_embeddings}, {self.embedding_dim}, int8{shared}"


class QuantizedProduct:
    """A fused trunk's product over a quantized weight: the same call as row_kernels.Product,
    one kernel whatever the row count (there is no layout to choose)."""

    copy = None  # row_kernels' transposed copy: never made for quantized weights

    def __init__(self, weight: QuantizedWeight, bias: torch.Tensor | None) -> None:
        self.weight = weight
        self.bias = bias

    def __call__(self, x: torch.Tensor, kernel: int = 0) -> torch.Tensor:
        flat = x.reshape(-1, self.weight.in_features)  # [R, in]
        out = self.weight.matmul(flat)  # [R, out]
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.weight.out_features)


class SplitProduct(QuantizedProduct):
    """Products over the same input whose weights differ in kind (a GGUF file's q/k/v), run
    one after the other: their outputs side by side, as one fused product's."""

    def __init__(self, weights: list[QuantizedWeight], bias: torch.Tensor | None) -> None:
        super().__init__(weights[0], bias)
        self.parts = weights
        self.out_features = sum(w.out_features for w in weights)

    def __call__(self, x: torch.Tensor, kernel: int = 0) -> torch.Tensor:
        flat = x.reshape(-1, self.weight.in_features)  # [R, in]
        out = torch.cat([w.matmul(flat) for w in self.parts], dim=-1)  # [R, out]
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)


def fuse_quantized(linears: list[QuantizedLinear]) -> QuantizedProduct:
    """One product for quantized linears over the same input (q/k/v). int8 modules become views
    of the fused weight's rows; int4 ones keep their own (its packing tiles rows). Weights of
    different kinds or layouts are not fused (SplitProduct)."""
    biases = [m.bias for m in linears]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat(
            [
                b.detach() if b is not None else torch.zeros(m.out_features)
                for b, m in zip(biases, linears, strict=True)
            ]
        )
    if len(linears) == 1:
        return QuantizedProduct(linears[0].quantized, bias)
    if len({(m.quantized.kind, m.quantized.layout) for m in linears}) > 1:
        return SplitProduct([m.quantized for m in linears], bias)
    fused = concat([m.quantized for m in linears])
    if fused.kind == "int8":
        start = 0
        for module in linears:
            module.quantized = fused.rows(start, start + module.out_features)
            start += module.out_features
    return QuantizedProduct(fused, bias)


def _quantize_embedding(model: Any, dtype: torch.dtype, tied: bool) -> int:
    """The input embedding as int8 rows (the LM head's own, when tied); bytes freed. A table
    of another type (one that scales its rows, say) stays as it is."""
    table = model.get_input_embeddings()
    if type(table) is not nn.Embedding or table.max_norm is not None:
        return 0
    head = model.get_output_embeddings()
    if tied and isinstance(head, QuantizedLinear) and head.quantized.kind == "int8":
        weight, shared = head.quantized, True
    else:
        with torch.no_grad():
            # Looked up, never multiplied: rows as they are.
            weight, shared = quantize_weight(table.weight, "int8", dtype, "aten"), False
    model.set_input_embeddings(QuantizedEmbedding(weight, dtype, shared=shared))
    dense = table.weight.numel() * table.weight.element_size()
    return dense - (0 if shared else weight.nbytes())


def unsupported_reason(kind: Kind, linear: nn.Linear) -> str | None:
    """Why this linear cannot be quantized this way, if it cannot."""
    if kind != "int4":
        return None
    if linear.in_features % max(INT4_GROUP, 16 * INT4_INNER_K_TILES):
        return f"int4 needs input sizes divisible by {INT4_GROUP} (this has {linear.in_features})"
    if linear.out_features % 16:
        return f"int4 needs output sizes divisible by 16 (this has {linear.out_features})"
    return None


def quantizable_linears(model: Any) -> Iterator[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, module) for every plain linear of the decoder layers and the head."""
    for layer in model.base_model.layers:
        for parent in layer.modules():
            for name, child in list(parent.named_children()):
                if type(child) is nn.Linear:
                    yield parent, name, child
    head = model.get_output_embeddings()
    if type(head) is nn.Linear:
        for parent in model.modules():
            for name, child in list(parent.named_children()):
                if child is head:
                    yield parent, name, child


def quantize_model(
    model: Any, kind: Quantization, layout: Layout | None = None, plan: MixedPlan | None = None
) -> int:
    """Swap the linears for QuantizedLinear (`kind`) and a plain embedding table for a
    QuantizedEmbedding, in place; returns bytes of weights freed. A tied model's table becomes
    a view of its quantized LM head. `layout`: the decoder linears' (default: the fastest here
    that all of them fit); the head takes the fastest it fits, or "aten" with layout "aten".
    `kind` "gguf" takes each weight's kind (and int4 grid) from `plan`."""
    if kind == "none":
        return 0
    if kind == "gguf" and plan is None:
        raise ValueError("quantization gguf needs the kinds of a GGUF file's weights")
    dtype = model.get_input_embeddings().weight.dtype
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    names = {id(module): f"{name}.weight" for name, module in model.named_modules()}

    def kind_of(linear: nn.Linear) -> Kind:
        # The LM head decides every token: int8 even under int4 (llama.cpp's mixes keep it
        # at 6-8 bits too).
        if linear is head:
            return "int8"
        if plan is None:
            return "int8" if kind == "int8" else "int4"
        wanted = plan.kinds.get(names[id(linear)], "int8")
        return "int8" if unsupported_reason(wanted, linear) else wanted

    linears = [linear for _, _, linear in quantizable_linears(model)]
    trunk = [linear for linear in linears if linear is not head]
    for linear in linears:  # all or nothing: check before changing
        reason = unsupported_reason(kind_of(linear), linear)
        fits = vnni_layout.fits(linear.out_features, linear.in_features)
        if layout == "vnni" and linear is not head and not fits:
            reason = f"the vnni layout needs shapes in tiles of 16 x 128 (this is {linear})"
        if reason is not None:
            raise ValueError(reason)
    # One layout for the decoder's linears (fused q/k/v must share one); the head its own.
    fits = all(vnni_layout.fits(m.out_features, m.in_features) for m in trunk)
    native_dtype = dtype in (torch.bfloat16, torch.float32)  # what the native kernels take
    trunk_layout = layout or (native_layout() if fits and native_dtype else "aten")
    freed = 0
    # One linear at a time, so each dense weight can go before the next is quantized.
    for parent, name, linear in quantizable_linears(model):
        linear_kind = kind_of(linear)
        head_layout: Layout | None = "aten" if layout == "aten" else None
        own_layout = trunk_layout if linear is not head else head_layout
        grid = plan.grid(names[id(linear)]) if plan and linear_kind == "int4" else None
        with torch.no_grad():
            weight = quantize_weight(linear.weight, linear_kind, dtype, own_layout, grid)
        bias = linear.bias.detach() if linear.bias is not None else None
        fingerprint = weight_fingerprint(linear.weight)
        setattr(parent, name, QuantizedLinear(weight, bias, fingerprint))
        freed += linear.weight.numel() * linear.weight.element_size() - weight.nbytes()
    freed += _quantize_embedding(model, dtype, tied)
    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False  # the head is no longer the embedding
    # What stays dense (embeddings, norms) may be views of the memory-mapped weight file: as
    # copies they let the mapping go, and the whole file's pages with it.
    with torch.no_grad():
        for param in model.parameters():
            param.data = param.data.clone()
    return freed
