"""The KV cache every decoder here uses: the project's own, with layers that grow in place.

`KVCache` has the part of transformers' DynamicCache the decoders use (`layers[i].keys` /
`.values`, `update`, `get_seq_length`, `crop` by a negative count, `reset`), so a model whose
layers are all plain full attention is served without importing transformers (a cached
Llama-family model run by FusedTrunk: the start-up path). Where transformers' own forward takes
the cache (HFTrunk, the twin of llama_family, KV compression), `for_transformers` hands it a
DynamicCache over the very same layer objects, so what its forward appends lands here. Models
with other layer kinds (sliding windows, ...) get transformers' DynamicCache itself, its plain
layers growing in place too.

`Layer` is transformers' DynamicLayer: each step's keys and values appended with torch.cat,
copying the whole cache every token, a noticeable share of a small model's decoding step on a
CPU (figures: docs/speculative.md). GrowingLayer keeps a buffer with spare room and hands out a
view of its filled part, so a step writes only the new positions. It is still a Layer to
everything else: `crop` slices the view, in-place edits of `keys`/`values` write to the buffer,
and a tensor assigned from outside (a compressed cache) is adopted on the next update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .family_config import LlamaFamilyConfig

if TYPE_CHECKING:
    from typing import TypeAlias

    from transformers import DynamicCache

SPARE = 256  # positions of room added beyond a quarter of what is filled

# The layer types of transformers' configs that DynamicCache makes a plain DynamicLayer for.
FULL_ATTENTION = "full_attention"


class Layer:
    """One layer's keys and values [B, heads, S, D], as transformers' DynamicLayer keeps them
    (the same attributes and methods, so transformers' forward can run on it)."""

    is_sliding = False
    is_croppable = True
    is_compileable = False
    supports_early_init = True

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.is_initialized = False
        self.device: torch.device | None = None

    def __repr__(self) -> str:
        return type(self).__name__

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.keys = torch.tensor([], dtype=key_states.dtype, device=self.device)
        self.values = torch.tensor([], dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.keys is not None and self.values is not None
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        if not self.is_initialized or self.keys is None or self.keys.numel() == 0:
            return 0
        return int(self.keys.shape[-2])

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """The length and offset of the keys a pass of `query_length` attends to (masks)."""
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1  # no maximum

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -`tokens_to_remove` positions (a negative count, as transformers')."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of positions, not {tokens_to_remove}")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        assert self.keys is not None and self.values is not None
        self.keys = self.keys[..., :tokens_to_remove, :]
        self.values = self.values[..., :tokens_to_remove, :]

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized = False


class GrowingLayer(Layer):
    _key_buffer: torch.Tensor | None = None
    _value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old_keys, old_values = self.keys, self.values
        assert old_keys is not None and old_values is not None
        filled = old_keys.shape[-2] if old_keys.numel() else 0
        end = filled + key_states.shape[-2]
        keys, values = self._key_buffer, self._value_buffer
        if keys is None or values is None or not _backs(keys, old_keys, key_states, end):
            keys, values = (
                _grown(old_keys, key_states, filled, end),
                _grown(old_values, value_states, filled, end),
            )
            self._key_buffer, self._value_buffer = keys, values
        keys[..., filled:end, :] = key_states
        values[..., filled:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def reset(self) -> None:
        super().reset()
        self._key_buffer = self._value_buffer = None


def _backs(buffer: torch.Tensor, view: torch.Tensor, new: torch.Tensor, end: int) -> bool:
    """Whether the buffer holds the current view (not a tensor assigned from outside, such as a
    compressed cache) and has room up to `end`."""
    if end > buffer.shape[-2] or buffer.shape[:-2] != new.shape[:-2] or buffer.dtype != new.dtype:
        return False
    return view.numel() == 0 or view.data_ptr() == buffer.data_ptr()


def _grown(view: torch.Tensor, new: torch.Tensor, filled: int, end: int) -> torch.Tensor:
    """A new buffer holding the view's filled positions, with room to spare."""
    capacity = end + max(SPARE, end // 4)  # a completion adds tens of tokens: rarely regrown
    buffer = new.new_empty((*new.shape[:-2], capacity, new.shape[-1]))
    if filled:
        buffer[..., :filled, :] = view
    return buffer


class KVCache:
    """A model's cache: one Layer per model layer (added as updates reach them when not given)."""

    def __init__(self, layers: list[Layer] | None = None) -> None:
        self.layers: list[Layer] = layers if layers is not None else []

    def __repr__(self) -> str:
        return f"KVCache(layers={self.layers})"

    def __len__(self) -> int:
        return len(self.layers)

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append a pass's keys and values [B, heads, S, D] to layer `layer_idx`; all its keys
        and values after."""
        while len(self.layers) <= layer_idx:
            self.layers.append(Layer())
        return self.layers[layer_idx].update(key_states, value_states, *args, **kwargs)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        if layer_idx >= len(self.layers):
            return 0
        return self.layers[layer_idx].get_seq_length()

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last -`tokens_to_remove` positions of every layer (a negative count)."""
        for layer in self.layers:
            layer.crop(tokens_to_remove)

    def reset(self) -> None:
        for layer in self.layers:
            layer.reset()


if TYPE_CHECKING:
    # What the decoders take: the project's cache, or transformers' for other layer kinds.
    Cache: TypeAlias = KVCache | DynamicCache


def new_cache(model: Any) -> Cache:
    """An empty cache for the model (see the module docstring)."""
    return cache_for_config(model.config)


def cache_for_config(config: Any) -> Cache:
    """new_cache for a model known by its config: a KVCache of growing layers when every layer is
    plain full attention, else transformers' DynamicCache whose plain layers grow in place."""
    if isinstance(config, LlamaFamilyConfig):  # read without transformers
        if plain_attention(config):
            return KVCache([GrowingLayer() for _ in range(config.num_hidden_layers)])
        config = config.transformers_config()
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        return KVCache([GrowingLayer() for _ in cache.layers])
    _known_to_transformers()
    layers: list[Any] = [
        GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    cache.layers = layers
    return cache


def plain_attention(config: Any) -> bool:
    """Whether every layer of the model is plain full attention, as transformers' DynamicCache
    decides it (a DynamicLayer for each): read in-house from the Llama family's own config,
    asked of transformers for its config classes."""
    if not isinstance(config, LlamaFamilyConfig):
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        return all(type(layer) is DynamicLayer for layer in DynamicCache(config=config).layers)
    if getattr(config, "kv_sharing_modes", None) is not None:
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(kind == FULL_ATTENTION for kind in layer_types)
    return (
        getattr(config, "sliding_window", None) is None
        and getattr(config, "attention_chunk_size", None) is None
    )


def for_transformers(cache: Any) -> Any:
    """The cache as transformers' forward takes it: a KVCache becomes a DynamicCache over the same
    list of layer objects (what the forward appends or crops is this cache's); anything else is
    returned as it is."""
    if not isinstance(cache, KVCache):
        return cache
    from transformers import DynamicCache

    _known_to_transformers()
    out = DynamicCache()
    out.layers = cache.layers  # type: ignore[assignment]  # the same list, not a copy
    out.layer_class_to_replicate = Layer  # type: ignore[assignment]
    return out


def _known_to_transformers() -> None:
    """Make Layer an attention layer to transformers' cache code (it tells them apart with
    isinstance of its abstract base class; registering is idempotent)."""
    from transformers.cache_utils import CacheLayerMixin

    CacheLayerMixin.register(Layer)


def plain_layer(layer: Any) -> bool:
    """Whether rows can be added to this layer and cropped again exactly: the project's Layer, or
    transformers' own DynamicLayer (not a subclass: sliding windows, quantized layers)."""
    if isinstance(layer, Layer):
        return True
    if not type(layer).__module__.startswith("transformers."):
        return False
    from transformers.cache_utils import DynamicLayer  # imported already: the layer is its

    return type(layer) is DynamicLayer
