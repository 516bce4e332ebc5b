"""The KV cache every decoder here uses: transformers' DynamicCache with layers that grow in place.

DynamicLayer appends each step's keys and values with torch.cat, copying the whole cache every
token: a noticeable share of a small model's decoding step on a CPU (figures:
docs/speculative.md). GrowingLayer keeps a buffer with spare room and hands out a
view of its filled part, so a step writes only the new positions. It is still a DynamicLayer to
everything else: `crop` slices the view, in-place edits of `keys`/`values` write to the buffer,
and a tensor assigned from outside (a compressed cache) is adopted on the next update.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

SPARE = 256  # positions of room added beyond a quarter of what is filled


class GrowingLayer(DynamicLayer):
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


def new_cache(model: Any) -> DynamicCache:
    """A DynamicCache for the model whose plain full-attention layers grow in place (sliding,
    quantized or other layer types are kept as transformers made them)."""
    return cache_for_config(model.config)


def cache_for_config(config: Any) -> DynamicCache:
    """new_cache for a model known by its config."""
    cache = DynamicCache(config=config)
    cache.layers = [
        GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
    ]
    return cache
