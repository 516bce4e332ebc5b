"""The model's transformer trunk (embeddings -> layers -> final norm) as the decoders run it.

A decoding step of a small model on a CPU is bound by per-operator overhead and by reading the
weights, not by arithmetic. transformers' forward builds masks, dispatches ~30 modules a layer and
makes 7 matrix products a layer; FusedTrunk does the same math for the Llama family (Llama,
Mistral without a sliding window, Qwen2, Qwen3) with q/k/v fused into one product (gate and up
stay apart: SiLU over a slice of a fused output is slow in a prefill), products over a few rows
run whichever kernel this CPU, at this thread count, ran fastest when timed (row_kernels),
RMSNorm as one operator, rotary embeddings for queries and keys at once and a mask built only
when one is needed (what each of these saved: docs/speculative.md). The model's own modules keep
working: their weights become views into the fused matrices; the only copies are row_kernels'
transposed ones, kept for small models and only while some row count runs fastest with them.

Every decoder that must agree token for token with plain greedy decoding (greedy.py,
speculative.py) runs through `prepare_trunk(model)`, so they share exactly the same arithmetic.
Other models get HFTrunk, transformers' own forward behind the same call.

In bfloat16 (and with int8 / int4 weights, whose activations are bfloat16) a verification pass
is made bitwise equal to one-token steps, so speculative decoding stays token-for-token what
plain greedy decoding gives there too. The products and norms already are (each row of a
product comes out the same whatever the row count); attention is not: one batched call over k
queries with a mask rounds differently from k one-query calls (in bf16 enough to flip an argmax
now and then). So passes of up to EXACT_ROWS rows on top of a cache attend row by
row, each row to exactly the keys a one-token step would see (its prefix, or for a tree node the
past and its ancestors, gathered in order). Where the native kernels run (native_kernels.py),
one native_kernels.attend call does that for all rows of every pass, prompt prefills and one-token
steps included; with the native kernels' int8 / int4 products, which are row-consistent at any
row count, a token's keys and values are then the same bits however it entered the cache
(prefilled in a prompt, decoded, or verified), so a buffer's reused cache decodes exactly as a
cold prompt would, and faster than torch's bfloat16 attention for one query. Elsewhere each
verified row is a call of torch's attention of its own, and prompt prefills (`prefill=True`)
attend batched (row by row would make a long prompt's prefill many times slower). float32 keeps
the batched call: its rounding differences stay far below an argmax's margin. Figures:
docs/speculative.md.

The model owns its trunk: the first `prepare_trunk` re-lays its weights out and keeps the trunk
on the model itself (TRUNK_ATTRIBUTE), so the trunk lives exactly as long as the weights it
rewrote and is never built twice; there is no cache to evict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from . import native_kernels
from .kv_cache import cache_for_config, for_transformers, plain_attention
from .quantize import QuantizedLinear, QuantizedProduct, fuse_quantized
from .row_kernels import COPY, COPY_MAX_BYTES, FEW_ROWS, LINEAR, TRANSPOSED, Product, RowKernels

if TYPE_CHECKING:
    from .kv_cache import Cache

FUSED_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
TIMING_CONTEXT = 256  # cached tokens under the passes that choose the row kernels
TRUNK_ATTRIBUTE = "_memosight_trunk"  # where a prepared model keeps its trunk
EXACT_ROWS = 64  # passes up to this many rows attend row by row in half precision (see above)

# The keys one row attends to: a prefix of the cache (its length) or positions in order.
RowKeys = int | torch.Tensor


class NativeRows:
    """The keys of every row of a pass, as native_kernels.attend takes them: lengths [S], and the
    positions [S, L] of rows that see more than a prefix (an empty tensor when none does)."""

    def __init__(self, rows: list[RowKeys]) -> None:
        self.lengths = torch.tensor([r if isinstance(r, int) else int(r.numel()) for r in rows])
        listed = [r for r in rows if not isinstance(r, int)]
        self.index = torch.empty(0, dtype=torch.long)
        if listed:
            width = int(self.lengths.max())
            self.index = torch.zeros(len(rows), width, dtype=torch.long)
            for i, r in enumerate(rows):
                if isinstance(r, int):
                    self.index[i, :r] = torch.arange(r)
                else:
                    self.index[i, : r.numel()] = r


def prepare_trunk(model: Any) -> HFTrunk | FusedTrunk:
    """The trunk every decoder runs this model through. The first call builds it and, for the
    Llama family, rewrites the model's weights in place (q/k/v fused into one matrix a layer,
    each module's weight a view of its rows); later calls return the trunk the model keeps."""
    trunk = getattr(model, TRUNK_ATTRIBUTE, None)
    if trunk is None:
        # Fused weights must be ordinary tensors (training code may run the model later on).
        with torch.inference_mode(False), torch.no_grad():
            fused = fused_unsupported_reason(model) is None
            trunk = FusedTrunk(model) if fused else HFTrunk(model)
        setattr(model, TRUNK_ATTRIBUTE, trunk)
    return trunk


def fused_unsupported_reason(model: Any) -> str | None:
    """Why FusedTrunk cannot run this model (then HFTrunk does); None when it can."""
    config = model.config
    if getattr(config, "model_type", None) not in FUSED_MODEL_TYPES:
        return f"model type {getattr(config, 'model_type', None)!r} is not of the Llama family"
    if getattr(config, "partial_rotary_factor", 1.0) != 1.0:
        return "partial rotary embeddings"
    if not plain_attention(config):
        return "sliding-window or other non-plain attention layers"
    if any(hasattr(module, "_hf_hook") for module in model.modules()):
        return "weights dispatched by accelerate"
    norms = [model.base_model.norm]
    for layer in model.base_model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        linears = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj]
        linears += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
        kinds = {type(module) for module in linears}
        if len(kinds) > 1 or not kinds <= {nn.Linear, QuantizedLinear}:
            return "custom or partly quantized linear layers"
        norms += [layer.input_layernorm, layer.post_attention_layernorm]
        norms += [getattr(attn, name) for name in ("q_norm", "k_norm") if hasattr(attn, name)]
    if not all(hasattr(norm, "variance_epsilon") for norm in norms):
        return "a norm other than the Llama family's RMSNorm"
    return None


class HFTrunk:
    """transformers' own forward, for models FusedTrunk does not cover."""

    def __init__(self, model: Any) -> None:
        self.trunk = model.base_model
        self.lm_head = model.get_output_embeddings()
        dtype = next(model.parameters()).dtype
        # eager attention adds the mask as-is: it needs 0 / -inf-like floats, not bools.
        self.additive_mask = getattr(model.config, "_attn_implementation", "eager") == "eager"
        self.mask_min = torch.finfo(dtype).min
        self.dtype = dtype
        # How long the last pass of alternatives took (inference/branches.py): a masked pass of a
        # few rows can cost several one-token steps, and the next request plans with it.
        self.branch_step_s = 0.0

    @torch.inference_mode()
    def __call__(
        self,
        input_ids: torch.Tensor,
        cache: Cache,
        *,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        prefill: bool = False,
    ) -> torch.Tensor:
        """input_ids [1, S] on top of the cache -> final hidden states [S, H]. positions [S]
        and mask [S, past + S] (bool, True = attend) default to plain causal order. `prefill`:
        prompt tokens, whose rows need not equal one-token steps (no row-by-row attention)."""
        return self._hidden(input_ids, cache, positions, mask, prefill)

    def _hidden(
        self,
        input_ids: torch.Tensor,
        cache: Cache,
        positions: torch.Tensor | None,
        mask: torch.Tensor | None,
        prefill: bool = False,
    ) -> torch.Tensor:
        kwargs: dict[str, Any] = {}
        if positions is not None:
            kwargs["position_ids"] = positions[None]
        if mask is not None:
            if self.additive_mask:
                mask = torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill(
                    ~mask, self.mask_min
                )
            kwargs["attention_mask"] = mask[None, None]
        out = self.trunk(
            input_ids=input_ids, cache=for_transformers(cache), use_cache=True, **kwargs
        )
        return out.last_hidden_state[0]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[R, H] -> fp32 logits [R, V] through the model's LM head."""
        return self.lm_head(hidden).float()


def _fuse(linears: list[Any]) -> Product | QuantizedProduct:
    """One [sum(out), in] weight (and bias) for linears over the same input. Each module's weight
    becomes a view of its rows, so nothing stays copied."""
    if isinstance(linears[0], QuantizedLinear):
        return fuse_quantized(linears)
    weight = torch.cat([module.weight.detach() for module in linears]).contiguous()
    bias = None
    if any(module.bias is not None for module in linears):
        bias = torch.cat(
            [
                module.bias.detach()
                if module.bias is not None
                else module.weight.new_zeros(module.out_features)
                for module in linears
            ]
        )
    start = 0
    for module in linears:
        end = start + module.out_features
        module.weight = nn.Parameter(weight[start:end], requires_grad=False)
        if bias is not None and module.bias is not None:
            module.bias = nn.Parameter(bias[start:end], requires_grad=False)
        start = end
    return Product(weight, bias)


# (layer index, the pass's queries [S, heads * D] before q_norm and rotary) -> None
QueryHook = Callable[[int, torch.Tensor], None]


def _rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """The Llama-family RMSNorm module's math as one fused operator (same values in fp32, a third
    of the time for a few rows: the module makes five small ops)."""
    return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)


class _FusedLayer:
    def __init__(self, layer: Any, config: Any, index: int) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.index = index
        self.input_norm = layer.input_layernorm
        self.post_norm = layer.post_attention_layernorm
        self.q_norm = getattr(attn, "q_norm", None)  # Qwen3
        self.k_norm = getattr(attn, "k_norm", None)
        self.n_heads = int(config.num_attention_heads)
        self.n_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(attn.head_dim)
        self.scaling = float(attn.scaling)
        self.qkv = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        self.gate = _fuse([mlp.gate_proj])
        self.up = _fuse([mlp.up_proj])
        self.o = _fuse([attn.o_proj])
        self.down = _fuse([mlp.down_proj])
        self.act = mlp.act_fn
        self.query_hook: QueryHook | None = None  # FusedTrunk.capture_queries

    def __call__(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: Cache,
        mask: torch.Tensor | None,
        causal: bool,
        kernel: int,
        row_keys: list[RowKeys] | NativeRows | None = None,
    ) -> torch.Tensor:
        seq = x.shape[1]
        heads, kv_heads = self.n_heads, self.n_kv_heads
        qkv = self.qkv(_rms_norm(x, self.input_norm), kernel)  # [1, S, q + 2 kv]
        if self.query_hook is not None:
            self.query_hook(self.index, qkv[0, :, : heads * self.head_dim])  # [S, q]
        # [1, heads + 2 kv_heads, S, D]: queries, keys and values head by head.
        qkv = qkv.view(1, seq, heads + 2 * kv_heads, self.head_dim).transpose(1, 2)
        qk, v = qkv[:, : heads + kv_heads], qkv[:, heads + kv_heads :]
        if self.q_norm is not None and self.k_norm is not None:
            q, k = _rms_norm(qk[:, :heads], self.q_norm), _rms_norm(qk[:, heads:], self.k_norm)
            qk = torch.cat((q, k), dim=1)
        # Rotary for queries and keys at once; sin carries rotate_half's sign (see _hidden).
        qk = torch.addcmul(qk * cos, qk.roll(self.head_dim // 2, dims=-1), sin)
        q, k = qk[:, :heads], qk[:, heads:]
        keys, values = cache.update(k, v, self.index)
        if isinstance(row_keys, NativeRows):
            kernels = native_kernels.kernels()
            assert kernels is not None  # NativeRows are made only where they run
            attended = kernels.attend(  # [S, heads, D]
                q[0].transpose(0, 1),
                keys[0],
                values[0],
                row_keys.lengths,
                row_keys.index,
                self.scaling,
            )
            return self._finish(x, attended.view(1, seq, heads * self.head_dim), kernel)
        if row_keys is None:
            attended = F.scaled_dot_product_attention(
                q,
                keys,
                values,
                attn_mask=mask,
                is_causal=causal,
                scale=self.scaling,
                enable_gqa=self.n_kv_heads != self.n_heads,
            )
        else:  # [1, heads, S, D], each row as a one-token step computes it
            attended = torch.cat(
                [
                    self._attend_one(q[:, :, i : i + 1], keys, values, sel)
                    for i, sel in enumerate(row_keys)
                ],
                dim=2,
            )
        attended = attended.transpose(1, 2).reshape(1, seq, heads * self.head_dim)
        return self._finish(x, attended, kernel)

    def _finish(self, x: torch.Tensor, attended: torch.Tensor, kernel: int) -> torch.Tensor:
        """The attention's output projection and residual, then the MLP block."""
        x = x + self.o(attended, kernel)
        h = _rms_norm(x, self.post_norm)
        return x + self.down(self.act(self.gate(h, kernel)).mul_(self.up(h, kernel)), kernel)

    def _attend_one(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, sel: RowKeys
    ) -> torch.Tensor:
        """One query [1, heads, 1, D] over the keys a one-token step would have."""
        if isinstance(sel, int):
            keys, values = keys[:, :, :sel], values[:, :, :sel]
        else:
            keys, values = keys.index_select(2, sel), values.index_select(2, sel)
        return F.scaled_dot_product_attention(
            q, keys, values, scale=self.scaling, enable_gqa=self.n_kv_heads != self.n_heads
        )


def _row_keys(mask: torch.Tensor | None, past: int, seq: int) -> list[RowKeys]:
    """Per row of a pass, the keys it attends to: a causal pass (mask None) sees prefixes; a
    tree row [past + seq] bool sees the past and its ancestors (a prefix when contiguous)."""
    if mask is None:
        return [past + i + 1 for i in range(seq)]
    out: list[RowKeys] = []
    for row in mask:
        index = row.nonzero().squeeze(1)
        count = int(index.numel())
        out.append(count if int(index[-1]) == count - 1 else index)
    return out


class FusedTrunk(HFTrunk):
    """The Llama-family trunk with fused products (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        base = model.base_model
        self.embed = base.embed_tokens
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.layers = [
            _FusedLayer(layer, model.config, index) for index, layer in enumerate(base.layers)
        ]
        self.model_config = model.config
        # The head this trunk multiplies itself (a plain or quantized linear), else the module's.
        self.head: Product | QuantizedProduct | None = None
        if type(self.lm_head) is nn.Linear:
            self.head = Product(self.lm_head.weight, getattr(self.lm_head, "bias", None))
        elif isinstance(self.lm_head, QuantizedLinear):
            self.head = QuantizedProduct(self.lm_head.quantized, self.lm_head.bias)
        # Few-row products may run any kernel on a CPU in fp32 (row_kernels); elsewhere F.linear
        # or the quantized kernel.
        products = self._products()
        dense = [p for p in products if isinstance(p, Product)]
        self.timed_kernels = (
            self.head is not None
            and len(dense) == len(products)
            and all(p.weight.is_cpu and p.weight.dtype == torch.float32 for p in dense)
        )
        self.kernels: RowKernels | None = None
        # Half precision: verification passes attend row by row (see the module docstring),
        # with the native kernel where it runs (one-token steps then too, to match).
        self.exact_rows = self.dtype != torch.float32
        self.native_rows = (
            self.exact_rows
            and self.norm.weight.is_cpu
            and self.dtype == torch.bfloat16
            and self.layers[0].head_dim in native_kernels.ATTENTION_HEAD_SIZES
            and native_kernels.kernels() is not None
        )
        size = sum(p.weight.numel() * p.weight.element_size() for p in dense)
        if self.timed_kernels and size <= COPY_MAX_BYTES:
            for product in dense:
                product.make_copy()

    def _hidden(
        self,
        input_ids: torch.Tensor,
        cache: Cache,
        positions: torch.Tensor | None,
        mask: torch.Tensor | None,
        prefill: bool = False,
    ) -> torch.Tensor:
        kernel = self._kernel(input_ids.shape[-1])
        return self._forward(input_ids, cache, positions, mask, kernel, exact=not prefill)

    def capture_queries(self, hook: QueryHook | None) -> None:
        """Hand every layer's queries of each pass to `hook` (None: stop). The queries come
        from the fused q/k/v product, so the q_proj modules' forward hooks never see them:
        SnapKV's query capture (kv_compress.QueryCapture) comes here instead."""
        for layer in self.layers:
            layer.query_hook = hook

    def skip_timing(self) -> None:
        """Few-row products run F.linear, untimed, and no copies are kept: for one-shot use
        (`memosight complete`), where timing the kernels would cost more than it saves."""
        self.timed_kernels = False
        self._drop_copies()

    def _kernel(self, rows: int) -> int:
        """The kernel products over `rows` rows run (row_kernels; timed when first needed,
        unless a choice was given: use_row_kernels). Under another thread count than the
        choice was timed with (inference/core_share.py lowers it on a busy machine) F.linear: a
        timing then would cost the request it runs in, and measure the other job too."""
        if not self.timed_kernels or rows > FEW_ROWS:
            return LINEAR
        if self.kernels is None:
            timed = self.time_row_kernels()
            assert timed is not None  # timed_kernels
            self.use_row_kernels(timed)
        assert self.kernels is not None
        if self.kernels.threads != torch.get_num_threads():
            return LINEAR
        return self.kernels.kernel(rows)

    def time_row_kernels(self, cancelled: Callable[[], bool] | None = None) -> RowKernels | None:
        """Time the few-row kernels on this trunk's passes now (None: it does not time them);
        raises timing.TimingCancelled when `cancelled()` turns true between passes."""
        if not self.timed_kernels:
            return None
        products = self._products()
        copies = all(product.copy is not None for product in products)
        kernels = [LINEAR, TRANSPOSED] + ([COPY] if copies else [])
        return RowKernels.timed(self._time_pass(), kernels, cancelled=cancelled)

    def use_row_kernels(self, kernels: RowKernels, *, timed: bool = True) -> None:
        """Run these few-row kernels from now on (timed here, or kept from an earlier run; not
        `timed`: defaults until they are, which keep the copies a timing may choose); between
        jobs only: a pass's products all run one choice."""
        self.kernels = kernels
        if timed and COPY not in kernels.chosen:
            self._drop_copies()  # never chosen: free the memory

    def _products(self) -> list[Product | QuantizedProduct]:
        layers = [(layer.qkv, layer.o, layer.gate, layer.up, layer.down) for layer in self.layers]
        products = [product for group in layers for product in group]
        return products + ([self.head] if self.head is not None else [])

    def _drop_copies(self) -> None:
        for product in self._products():
            if isinstance(product, Product):
                product.copy = None

    def _forward(
        self,
        input_ids: torch.Tensor,
        cache: Cache,
        positions: torch.Tensor | None,
        mask: torch.Tensor | None,
        kernel: int,
        exact: bool = True,
    ) -> torch.Tensor:
        seq = input_ids.shape[-1]
        past = cache.get_seq_length()
        device = input_ids.device
        if positions is None:
            positions = torch.arange(past, past + seq, device=device)
        causal = False
        row_keys: list[RowKeys] | NativeRows | None = None
        if self.native_rows:  # prompt rows too: a token's keys then never depend on the pass
            row_keys = NativeRows(_row_keys(mask, past, seq))
            mask = None
        elif self.exact_rows and exact and past > 0 and 1 < seq <= EXACT_ROWS:
            row_keys = _row_keys(mask, past, seq)
            mask = None
        elif mask is None and seq > 1:
            if past == 0:
                causal = True  # SDPA's own causal mask is aligned to the top left: no past only
            else:
                mask = torch.ones(seq, past + seq, dtype=torch.bool, device=device).tril(past)
        x = self.embed(input_ids)  # [1, S, H]
        attn_mask = None
        if mask is not None:
            # Additive, made once: attention would convert a bool mask again in every layer.
            attn_mask = torch.zeros(mask.shape, dtype=x.dtype, device=device)
            attn_mask = attn_mask.masked_fill_(~mask, float("-inf"))[None, None]
        cos, sin = self.rotary(x, positions[None])  # [1, S, D]
        # rotate_half(t) * sin == t.roll(D / 2) * signed_sin: one operator instead of four.
        half = sin.shape[-1] // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        cos, sin = cos[:, None], sin[:, None]
        for layer in self.layers:
            x = layer(x, cos, sin, cache, attn_mask, causal, kernel, row_keys)
        return _rms_norm(x, self.norm)[0]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            return super().logits(hidden)
        return self.head(hidden, self._kernel(hidden.shape[0])).float()

    def _time_pass(self) -> Callable[[int, int], None]:
        """run(rows, kernel): a causal pass over `rows` tokens on a cache of TIMING_CONTEXT
        (fewer where the model has fewer positions) and their logits, rolled back after. Timed
        as a whole: how fast the LM head runs depends on what the pass left in the CPU's caches
        (alone, in a loop, a one-row product by the head looks much faster than in a pass)."""
        vocab = int(self.model_config.vocab_size)
        limit = int(getattr(self.model_config, "max_position_embeddings", 0) or 0)
        context = TIMING_CONTEXT if not limit else max(0, min(TIMING_CONTEXT, limit - FEW_ROWS))
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (1, context + FEW_ROWS), generator=generator)
        ids = ids.to(self.norm.weight.device)
        cache = cache_for_config(self.model_config)
        if context:
            self._forward(ids[:, :context], cache, None, None, LINEAR)

        def run(rows: int, kernel: int) -> None:
            hidden = self._forward(ids[:, context : context + rows], cache, None, None, kernel)
            assert self.head is not None  # timed kernels need the trunk's own head
            self.head(hidden, kernel)
            cache.crop(-rows)

        return run
