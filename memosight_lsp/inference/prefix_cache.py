"""Per-buffer KV cache reuse across keystrokes: prefill only what changed since the last request.

Each buffer keeps the cache of its last decode and the exact token ids whose keys/values it
holds. A new prompt reuses the longest common token prefix; comparing token ids (not text) is
what makes the rollback safe: appending a character can re-tokenize the last token, and the
common prefix then simply stops before it. At least one prompt token is always recomputed so
the caller gets the logits of the last prompt position. Buffers are evicted least recently used
first when the total exceeds a byte budget. A decoder may attach what else it keeps for the
buffer (the speculative decoder's index of its last suggestion): it lives and goes with the
cache, under the same policy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .kv_cache import new_cache

if TYPE_CHECKING:
    from .kv_cache import Cache

DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024


@dataclass(kw_only=True)
class _Entry:
    model_key: int
    tokens: list[int]  # the ids whose keys/values the cache holds, in order
    cache: Cache
    nbytes: int
    attachment: Any = None


def cache_bytes(cache: Cache, *, held: bool = False) -> int:
    """Bytes of the keys and values of every layer; with `held`, of their whole storages (the
    memory really kept: a cropped view or a growing layer's spare room holds more)."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if tensor is None or not hasattr(tensor, "numel"):
                continue
            if held:
                total += tensor.untyped_storage().nbytes()
            else:
                total += tensor.numel() * tensor.element_size()
    return total


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    limit = min(len(a), len(b))
    # Compare in blocks first: prompts share thousands of tokens and Python loops are slow.
    i = 0
    step = 256
    while i + step <= limit and a[i : i + step] == b[i : i + step]:
        i += step
    while i < limit and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """LRU of per-buffer KV caches under a byte budget. Not thread-safe: one worker uses it."""

    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES, max_buffers: int = 32) -> None:
        self.budget_bytes = budget_bytes
        self.max_buffers = max_buffers
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.reused_tokens = 0
        self.evictions = 0

    def take(self, buffer_id: str | None, model, prompt_ids: Sequence[int]) -> tuple[Cache, int]:
        """A cache holding the first `reused` prompt tokens (removed from the LRU while in use)."""
        entry = self._entries.pop(buffer_id, None) if buffer_id is not None else None
        if entry is None or entry.model_key != id(model):
            self.misses += 1
            return new_cache(model), 0
        reused = min(common_prefix(entry.tokens, prompt_ids), len(prompt_ids) - 1)
        if reused <= 0:
            self.misses += 1
            return new_cache(model), 0
        drop = len(entry.tokens) - reused
        if drop > 0:
            entry.cache.crop(-drop)
        self.hits += 1
        self.reused_tokens += reused
        return entry.cache, reused

    def attachment(self, buffer_id: str | None, model) -> Any:
        """What the decoder attached to the buffer's cache (None without one); call before take."""
        entry = self._entries.get(buffer_id) if buffer_id is not None else None
        return entry.attachment if entry is not None and entry.model_key == id(model) else None

    def put(
        self,
        buffer_id: str | None,
        model,
        tokens: Sequence[int],
        cache: Cache,
        attachment: Any = None,
    ) -> None:
        """Keep `cache` (holding exactly `tokens`) for the buffer; evicts to fit the budget."""
        if buffer_id is None:
            return
        self._entries.pop(buffer_id, None)
        nbytes = cache_bytes(cache, held=True)
        if nbytes > self.budget_bytes:
            return
        self._entries[buffer_id] = _Entry(
            model_key=id(model),
            tokens=list(tokens),
            cache=cache,
            nbytes=nbytes,
            attachment=attachment,
        )
        while self._entries and (
            self.memory_bytes() > self.budget_bytes or len(self._entries) > self.max_buffers
        ):
            self._entries.popitem(last=False)
            self.evictions += 1

    def forget(self, buffer_id: str) -> None:
        """Drop a buffer's cache (the document was closed)."""
        self._entries.pop(buffer_id, None)

    def clear(self) -> None:
        self._entries.clear()

    def memory_bytes(self) -> int:
        return sum(entry.nbytes for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, buffer_id: object) -> bool:
        return buffer_id in self._entries

    def stats(self) -> dict:
        return {
            "buffers": len(self._entries),
            "bytes": self.memory_bytes(),
            "budgetBytes": self.budget_bytes,
            "hits": self.hits,
            "misses": self.misses,
            "reusedTokens": self.reused_tokens,
            "evictions": self.evictions,
        }
