"""SnapKV-style KV cache compression: keep the cached positions the end of the prompt attends to.

After the prompt is prefilled, the queries of an observation window (the last `window` prompt
tokens) are scored against every cached key, per layer and per KV head:

    score[l, h, j] = sum over window queries i and the query heads of group h of softmax_j(q_i k_j)

The scores are smoothed with a 1-D pool (a kept token drags its neighbours along, which keeps
identifiers whole), and each layer keeps, per head, its attention sinks (the first tokens), the
top-scoring middle positions and the recent window, in their original order. Kept keys keep the
rotary positions they were computed at, so new tokens must be fed at their true positions
(`CompressedKV.next_position`), not at the cache length.

The window queries are not returned by the attention kernels (sdpa never materialises weights),
so they are captured during the normal prefill (QueryCapture: from the fused trunk's q/k/v
product, or a forward hook on each q_proj when the model's own forward runs) and rotated here
with the model's own rotary embedding. That is exact for Llama-shaped attention
(Llama, Qwen2, Mistral); other architectures report "not supported" and run uncompressed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .fused_trunk import TRUNK_ATTRIBUTE, FusedTrunk
from .kv_cache import KVCache

if TYPE_CHECKING:
    from .kv_cache import Cache

# Architectures whose attention is q_proj -> rotary -> softmax(q k^T * scaling), no q_norm.
SUPPORTED_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})


@dataclass(frozen=True, kw_only=True)
class SnapKVConfig:
    ratio: float = 4.0  # prompt positions per kept position (1 = keep everything)
    window: int = 32  # observation window: the last prompt tokens whose attention scores
    sinks: int = 4  # first tokens always kept (attention sinks)
    recent: int = 32  # last prompt tokens always kept (includes the window)
    # Share of each layer's budget kept as the most recent tokens (at least `recent`): code
    # completion leans on the lines right above the cursor, which attention alone may skip.
    recent_share: float = 0.0
    pool_kernel: int = 7  # smoothing of the scores along the sequence (odd)
    min_keep: int = 64  # never keep fewer positions than this
    # Per-layer budgets in positions; overrides `ratio`. Unequal budgets are allowed (decoding on
    # such a cache feeds one token per pass, since one causal mask serves all layers).
    layer_budgets: tuple[int, ...] | None = None

    def budget(self, length: int, layer: int) -> int:
        if self.layer_budgets is not None:
            wanted = self.layer_budgets[min(layer, len(self.layer_budgets) - 1)]
        else:
            wanted = round(length / max(self.ratio, 1.0))
        wanted = max(wanted, self.min_keep, self.sinks + self.recent)
        return min(length, wanted)

    def recent_for(self, budget: int) -> int:
        return max(self.recent, round(budget * self.recent_share))


@dataclass(kw_only=True)
class CompressedKV:
    """A compressed cache plus what is needed to keep decoding on it."""

    cache: Cache
    next_position: int  # rotary position of the next token fed (= prompt tokens consumed)
    kept: list[torch.Tensor] = field(default_factory=list)  # per layer [Hkv, k] kept entries
    original_length: int = 0

    @property
    def uniform(self) -> bool:
        """All layers hold the same number of entries (multi-token passes are safe)."""
        lengths = {layer.keys.shape[-2] for layer in layers_of(self.cache)}
        return len(lengths) <= 1

    def entries(self) -> int:
        return int(layers_of(self.cache)[0].keys.shape[-2])


def layers_of(cache: Cache) -> list[Any]:
    """The cache's per-layer key/value holders (typed loosely: transformers' union has no keys)."""
    return list(cache.layers)


def unsupported_reason(model: Any) -> str | None:
    """Why SnapKV cannot run on this model, or None when it can."""
    config = model.config
    model_type = getattr(config, "model_type", "?")
    if model_type not in SUPPORTED_MODEL_TYPES:
        return (
            f"KV compression supports {', '.join(sorted(SUPPORTED_MODEL_TYPES))}, not {model_type}"
        )
    if model_type == "mistral" and getattr(config, "sliding_window", None):
        return "KV compression does not support sliding-window attention"
    base = getattr(model, "model", None)
    layers = getattr(base, "layers", None)
    if base is None or layers is None or not hasattr(base, "rotary_emb"):
        return f"{type(model).__name__} has no Llama-style decoder layers"
    for layer in layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not hasattr(attn, "q_proj") or hasattr(attn, "q_norm"):
            return f"{type(model).__name__} attention is not Llama-shaped"
    return None


class QueryCapture:
    """Keeps the last `window` rows of every layer's q_proj output during a forward pass."""

    def __init__(self, model: Any, window: int) -> None:
        self.model = model
        self.window = window
        self.rows: dict[int, torch.Tensor] = {}  # layer -> [w, Hq*D] (pre-rotary)
        self._handles: list[Any] = []
        self._trunk: FusedTrunk | None = None

    def __enter__(self) -> QueryCapture:
        # Both ways a pass may run: the model's own forward calls each q_proj module; the
        # fused trunk (the decoders' path) makes the queries in one product and reports them.
        for index, layer in enumerate(self.model.model.layers):
            self._handles.append(layer.self_attn.q_proj.register_forward_hook(self._hook(index)))
        trunk = getattr(self.model, TRUNK_ATTRIBUTE, None)
        self._trunk = trunk if isinstance(trunk, FusedTrunk) else None
        if self._trunk is not None:
            self._trunk.capture_queries(self._keep)
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._trunk is not None:
            self._trunk.capture_queries(None)
            self._trunk = None

    def _hook(self, index: int):
        def hook(_module, _inputs, output: torch.Tensor) -> None:
            self._keep(index, output[0])  # [S, Hq*D]

        return hook

    def _keep(self, index: int, queries: torch.Tensor) -> None:
        rows = queries[-self.window :].detach()  # [w', Hq*D]
        previous = self.rows.get(index)
        # A prompt fed in several passes: keep the last `window` rows over all of them.
        if previous is not None and rows.shape[0] < self.window:
            rows = torch.cat([previous, rows])[-self.window :]
        self.rows[index] = rows


@torch.inference_mode()
def window_queries(model: Any, capture: QueryCapture, end_position: int) -> list[torch.Tensor]:
    """Rotated queries [Hq, w, D] per layer, for the captured rows ending at `end_position`."""
    out: list[torch.Tensor] = []
    for index, layer in enumerate(model.model.layers):
        rows = capture.rows[index]  # [w, Hq*D]
        attn = layer.self_attn
        w = rows.shape[0]
        q = rows.view(1, w, -1, attn.head_dim).transpose(1, 2)  # [1, Hq, w, D]
        positions = torch.arange(end_position - w, end_position, device=rows.device)[None]
        cos, sin = model.model.rotary_emb(rows[None], position_ids=positions)  # [1, w, D]
        cos, sin = cos[:, None], sin[:, None]  # [1, 1, w, D]
        half = q.shape[-1] // 2
        rotated = torch.cat(
            (-q[..., half:], q[..., :half]), dim=-1
        )  # the Llama family's rotate_half
        out.append((q * cos + rotated * sin)[0])
    return out


@torch.inference_mode()
def position_scores(
    queries: torch.Tensor, keys: torch.Tensor, scaling: float, pool_kernel: int
) -> torch.Tensor:
    """Pooled attention mass [Hkv, n] each cached key gets from the window queries.

    queries [Hq, w, D] at the last w positions; keys [Hkv, n, D] (rotated, as cached).
    """
    hq, w, d = queries.shape
    hkv, n, _ = keys.shape
    group = hq // hkv
    q = queries.float().reshape(hkv, group * w, d)  # query heads of one KV head side by side
    logits = torch.bmm(q, keys.float().transpose(1, 2)) * scaling  # [Hkv, G*w, n]
    # Causal: window query i (at position n-w+i) sees keys 0..n-w+i.
    rows = torch.arange(w, device=keys.device).repeat(group)  # [G*w]
    cols = torch.arange(n, device=keys.device)
    logits.masked_fill_(cols[None, :] > (n - w + rows)[:, None], float("-inf"))
    mass = torch.softmax(logits, dim=-1).sum(dim=1)  # [Hkv, n]
    if pool_kernel > 1:
        mass = F.avg_pool1d(mass[:, None], pool_kernel, stride=1, padding=pool_kernel // 2)[:, 0]
    return mass


def select_positions(scores: torch.Tensor, budget: int, sinks: int, recent: int) -> torch.Tensor:
    """Kept positions [Hkv, budget], ascending: sinks + top-scoring middle + recent."""
    hkv, n = scores.shape
    if budget >= n:
        return torch.arange(n, device=scores.device).expand(hkv, n)
    sinks = min(sinks, budget)
    recent = min(recent, budget - sinks)
    middle = budget - sinks - recent
    head = torch.arange(sinks, device=scores.device).expand(hkv, sinks)
    tail = torch.arange(n - recent, n, device=scores.device).expand(hkv, recent)
    picked = scores[:, sinks : n - recent].topk(middle, dim=-1).indices + sinks  # [Hkv, middle]
    return torch.cat([head, picked, tail], dim=-1).sort(dim=-1).values


@torch.inference_mode()
def gather_cache(cache: Cache, kept: Sequence[torch.Tensor]) -> KVCache:
    """A new cache holding, per layer and head, only the kept positions (source untouched)."""
    out = KVCache()  # plain layers, as many as the source has
    for index, (layer, positions) in enumerate(zip(layers_of(cache), kept, strict=True)):
        d = layer.keys.shape[-1]
        gather_index = positions[None, :, :, None].expand(1, -1, -1, d)  # [1, Hkv, k, D]
        keys = layer.keys.gather(2, gather_index)
        values = layer.values.gather(2, gather_index)
        out.update(keys, values, index)
    return out


@torch.inference_mode()
def compress(
    model: Any,
    cache: Cache,
    capture: QueryCapture,
    prompt_length: int,
    config: SnapKVConfig,
) -> CompressedKV:
    """A compressed copy of `cache`, which holds the `prompt_length` prompt positions.

    The cache may itself be compressed (a reused prefix plus new tokens): budgets count prompt
    positions, and `kept` then indexes the cache's entries rather than positions.
    """
    queries = window_queries(model, capture, prompt_length)
    kept: list[torch.Tensor] = []
    for index, layer in enumerate(layers_of(cache)):
        keys = layer.keys[0]  # [Hkv, n, D]
        n = keys.shape[1]
        budget = min(n, config.budget(prompt_length, index))
        if budget >= n:
            kept.append(torch.arange(n, device=keys.device).expand(keys.shape[0], n))
            continue
        attn = model.model.layers[index].self_attn
        scores = position_scores(queries[index], keys, attn.scaling, config.pool_kernel)
        kept.append(select_positions(scores, budget, config.sinks, config.recent_for(budget)))
    return CompressedKV(
        cache=gather_cache(cache, kept),
        next_position=prompt_length,
        kept=kept,
        original_length=prompt_length,
    )


def kept_fraction(compressed: CompressedKV, positions: Sequence[int]) -> float:
    """Share of (layer, head) slots that kept each of `positions`, averaged (the needle test)."""
    if not positions:
        return 0.0
    wanted = torch.tensor(list(positions))
    total = 0.0
    for kept in compressed.kept:
        hits = torch.isin(kept.cpu(), wanted).sum(dim=-1).float()  # [Hkv]
        total += float(hits.mean()) / len(positions)
    return total / max(len(compressed.kept), 1)
