"""Decoding on a SnapKV-compressed cache, lossy or as a lossless drafter.

- `snapkv_generate` ("lossy-snapkv"): prefill the whole prompt, compress the cache, decode
  greedily on the compressed cache. Less memory and cheaper attention per token; the output may
  differ from plain greedy.
- `CompressedDraftDecoder` ("lossless-draft"): the compressed cache only drafts. The model drafts
  k tokens greedily on the compressed cache, then one pass over the full cache verifies them;
  the longest agreeing prefix plus the full model's own next token are committed. Every
  committed token is the full-cache argmax, and the full cache is prefilled (chunked and
  cancellable, Run.prefill) and verified on greedy_generate's own trunk, so the output equals
  greedy_generate's in every precision.

Both honour StopRules and allowed_tokens token by token exactly like greedy_generate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .decoder import (
    AllowedTokens,
    Decoder,
    Generation,
    RowScores,
    Run,
    StopRules,
    pick,
    take_next,
)
from .drafters import DraftTree
from .fused_trunk import prepare_trunk
from .greedy import forward
from .kv_cache import for_transformers, new_cache
from .kv_compress import (
    CompressedKV,
    QueryCapture,
    SnapKVConfig,
    compress,
    layers_of,
    unsupported_reason,
)
from .prefix_cache import PrefixCache, cache_bytes

if TYPE_CHECKING:
    from .kv_cache import Cache


@torch.inference_mode()
def feed(
    model: Any,
    ids: Sequence[int],
    cache: Cache,
    position: int,
    *,
    uniform: bool = True,
    last_only: bool = False,
) -> torch.Tensor:
    """Run `ids` at rotary positions position.. on top of `cache`; logits [S, V] ([1, V])."""
    device = next(model.parameters()).device
    if not uniform and len(ids) > 1:  # one causal mask serves all layers: go one token at a time
        rows = [feed(model, [t], cache, position + i) for i, t in enumerate(ids)]
        return rows[-1] if last_only else torch.cat(rows)
    input_ids = torch.tensor([list(ids)], device=device)  # [1, S]
    positions = torch.arange(position, position + len(ids), device=device)[None]  # [1, S]
    out = model(
        input_ids=input_ids,
        position_ids=positions,
        cache=for_transformers(cache),
        use_cache=True,
        logits_to_keep=1 if last_only else 0,
    )
    return out.logits[0].float()  # [S, V]


@torch.inference_mode()
def prefill_and_compress(
    model: Any,
    prompt_ids: Sequence[int],
    config: SnapKVConfig,
    *,
    cache: Cache | None = None,
    reused: int = 0,
) -> tuple[torch.Tensor, Cache, CompressedKV]:
    """Last-position logits [V], the full cache and a compressed copy of it."""
    cache = cache if cache is not None else new_cache(model)
    with QueryCapture(model, config.window) as capture:
        logits = feed(model, prompt_ids[reused:], cache, reused, last_only=True)[-1]
    return logits, cache, compress(model, cache, capture, len(prompt_ids), config)


class OneShotSnapKVDecoder(Decoder):
    """Lossy-snapkv without reuse: prefill the whole prompt on a fresh cache, compress it, decode
    greedily on the compressed cache. Unsupported models run uncompressed."""

    def __init__(self, *, config: SnapKVConfig | None = None) -> None:
        super().__init__()
        self.config = config or SnapKVConfig()

    def generate(self, run: Run) -> None:
        model, prompt_ids, result = run.model, run.prompt_ids, run.result
        cache = run.new_cache()
        unsupported = unsupported_reason(model)
        position, uniform = len(prompt_ids), True
        if unsupported is None:
            logits, full, compressed = prefill_and_compress(
                model, prompt_ids, self.config, cache=cache
            )
            full_bytes = cache_bytes(full)
            del full  # only the compressed copy is kept
            cache, position = compressed.cache, compressed.next_position
            uniform = compressed.uniform
        else:
            logits = feed(model, prompt_ids, cache, 0, last_only=True)[-1]
            full_bytes = cache_bytes(cache)
        run.prefilled()
        result.stats = {
            "kvCompression": "lossy-snapkv" if unsupported is None else "off",
            "unsupported": unsupported,
            "fullKvBytes": full_bytes,
            "kvBytes": cache_bytes(cache),
            "keptPositions": int(layers_of(cache)[0].keys.shape[-2]),
        }
        allowed = run.allowed_tokens
        decode_greedy(model, logits, cache, position, run.rules, result, allowed, uniform=uniform)


def snapkv_generate(
    model: Any,
    prompt_ids: Sequence[int],
    rules: StopRules,
    *,
    config: SnapKVConfig | None = None,
    allowed_tokens: AllowedTokens | None = None,
) -> Generation:
    """Greedy decoding on a SnapKV-compressed cache (lossy). Unsupported models run uncompressed."""
    decoder = OneShotSnapKVDecoder(config=config)
    return decoder(model, prompt_ids, rules, allowed_tokens=allowed_tokens)


def decode_greedy(
    model: Any,
    logits: torch.Tensor,
    cache: Cache,
    position: int,
    rules: StopRules,
    result: Generation,
    allowed_tokens: AllowedTokens | None = None,
    *,
    uniform: bool = True,
) -> None:
    """Greedy from the prompt's last logits [V] on a (compressed) cache; fills `result`."""
    while (token := take_next(logits, result, rules, allowed_tokens)) is not None:
        # Positions continue from the prompt length, not from the (shorter) cache length.
        logits = feed(model, [token], cache, position, uniform=uniform)[-1]
        position += 1
        result.forward_passes += 1


class CompressedDraftDecoder(Decoder):
    """Lossless: drafts on a compressed cache, verifies on the full one (see the module doc).

    Called like greedy_generate; with a buffer_id the full cache is kept in the PrefixCache
    between requests (the compressed draft cache is rebuilt per request from it).
    """

    def __init__(
        self,
        *,
        config: SnapKVConfig | None = None,
        draft_tokens: int = 6,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        super().__init__(prefix_cache=prefix_cache)
        self.config = config or SnapKVConfig()
        self.draft_tokens = draft_tokens

    def generate(self, run: Run) -> None:
        model, prompt_ids, rules, result = run.model, run.prompt_ids, run.rules, run.result
        # The full cache is prefilled and verified on the trunk plain greedy decoding runs
        # (greedy.py), in the same chunks; only the drafts run the model's own forward, on
        # the compressed copy (they need its per-layer lengths and explicit positions).
        trunk = prepare_trunk(model)
        device = next(model.parameters()).device
        full, reused = run.take_cache()
        unsupported = unsupported_reason(model)
        capture = QueryCapture(model, self.config.window) if unsupported is None else None

        def step(ids: Sequence[int]) -> torch.Tensor:
            prompt = torch.tensor([list(ids)], device=device)  # [1, S]
            return forward(trunk, prompt, full, last_only=True, prefill=True)[-1]  # [V]

        with capture if capture is not None else contextlib.nullcontext():
            prefilled = run.prefill(step, full, reused)
        if prefilled is None:  # cancelled while prefilling (the prefix is kept)
            return
        logits = prefilled
        draft: CompressedKV | None = None
        if capture is not None:
            draft = compress(model, full, capture, len(prompt_ids), self.config)
        committed = list(prompt_ids)  # ids whose keys/values are in the full cache
        draft_fed = len(prompt_ids)  # committed ids the draft cache holds
        drafted = accepted = 0
        while (token := run.take_next(logits)) is not None:
            committed.append(token)
            room = min(rules.max_new_tokens - len(result.tokens), self.draft_tokens)
            proposal: list[int] = []
            if draft is not None and room > 0:
                proposal, draft_fed = self._draft(
                    model, draft, committed, draft_fed, result.tokens, room, run.allowed_tokens
                )
            # Verify [token, proposal...] on the full cache: row j predicts the token after j.
            pass_ids = torch.tensor([[token, *proposal]], device=device)  # [1, 1+k]
            rows = forward(trunk, pass_ids, full)  # [1+k, V]
            result.forward_passes += 1
            drafted += len(proposal)
            path, ended = run.accept(DraftTree.chain_of(proposal), RowScores(rows))
            j = len(path) - 1  # drafted tokens accepted
            committed.extend(proposal[:j])
            accepted += j
            if len(proposal) > j:
                full.crop(j - len(proposal))
            logits = rows[j]
            if draft is not None and draft_fed > len(committed):  # drop its rejected guesses
                draft.cache.crop(len(committed) - draft_fed)
                draft_fed = len(committed)
            if ended:
                break
        run.keep(committed[: _cache_length(full)], full)
        result.stats = {
            "kvCompression": "lossless-draft" if draft is not None else "off",
            "unsupported": unsupported,
            "reusedPromptTokens": reused,
            "draftedTokens": drafted,
            "acceptedDraftTokens": accepted,
            "draftKvBytes": cache_bytes(draft.cache) if draft is not None else 0,
            "fullKvBytes": cache_bytes(full),
        }

    @torch.inference_mode()
    def _draft(
        self,
        model: Any,
        draft: CompressedKV,
        committed: list[int],
        draft_fed: int,
        generated: list[int],
        room: int,
        allowed_tokens: AllowedTokens | None,
    ) -> tuple[list[int], int]:
        """Up to `room` greedy tokens from the compressed cache; returns them and ids it holds."""
        missing = committed[draft_fed:]  # the draft cache lags by the last committed ids
        logits = feed(
            model, missing, draft.cache, draft_fed, uniform=draft.uniform, last_only=True
        )[-1]
        draft_fed = len(committed)
        proposal: list[int] = []
        hypothetical = list(generated)
        while True:
            allowed = allowed_tokens(hypothetical) if allowed_tokens else None
            guess = pick(logits, allowed or None)
            proposal.append(guess)
            hypothetical.append(guess)
            if len(proposal) >= room:
                break
            logits = feed(model, [guess], draft.cache, draft_fed + len(proposal) - 1)[-1]
        # The cache now holds every guess but the last one.
        return proposal, draft_fed + len(proposal) - 1


def _cache_length(cache: Cache) -> int:
    return int(cache.get_seq_length())


class SnapKVDecoder(Decoder):
    """Lossy-snapkv with per-buffer reuse: the compressed cache itself goes in the PrefixCache.

    The PrefixCache crops entries from the end by token count, which is right as long as the
    reused prefix covers the compressed region (everything past it is one entry per token); a
    shorter match starts over. New tokens are fed at their true positions; once the
    uncompressed tail grows past `recompress_tail` tokens the whole cache is compressed again.
    Without a buffer (or on a model SnapKV does not support) it decodes as OneShotSnapKVDecoder.
    """

    def __init__(
        self,
        *,
        config: SnapKVConfig | None = None,
        prefix_cache: PrefixCache | None = None,
        recompress_tail: int = 256,
    ) -> None:
        super().__init__(prefix_cache=prefix_cache)
        self.config = config or SnapKVConfig()
        self.recompress_tail = recompress_tail
        self._compressed_end: dict[str, int] = {}  # buffer -> positions covered by compression

    def forget(self, buffer_id: str) -> None:
        super().forget(buffer_id)
        self._compressed_end.pop(buffer_id, None)

    def generate(self, run: Run) -> None:
        model, prompt_ids, buffer_id, result = run.model, run.prompt_ids, run.buffer_id, run.result
        if unsupported_reason(model) is not None or buffer_id is None:
            OneShotSnapKVDecoder(config=self.config).generate(run)
            return
        cache, reused = run.take_cache()
        compressed_end = self._compressed_end.pop(buffer_id, 0)
        if reused < compressed_end:  # the edit reaches into the compressed region: start over
            cache, reused, compressed_end = new_cache(model), 0, 0
        with QueryCapture(model, self.config.window) as capture:
            logits = feed(model, prompt_ids[reused:], cache, reused, last_only=True)[-1]
        tail = len(prompt_ids) - compressed_end
        if compressed_end == 0 or tail > self.recompress_tail:
            cache = compress(model, cache, capture, len(prompt_ids), self.config).cache
            compressed_end = len(prompt_ids)
        run.prefilled()
        result.stats = {
            "kvCompression": "lossy-snapkv",
            "reusedPromptTokens": reused,
            "keptPositions": int(layers_of(cache)[0].keys.shape[-2]),
            "kvBytes": cache_bytes(cache),
        }
        uniform = len({layer.keys.shape[-2] for layer in layers_of(cache)}) <= 1
        position, allowed = len(prompt_ids), run.allowed_tokens
        decode_greedy(model, logits, cache, position, run.rules, result, allowed, uniform=uniform)
        # The cache holds the prompt and every generated token but the last one.
        run.keep(list(prompt_ids) + result.tokens[: result.forward_passes - 1], cache)
        self._compressed_end[buffer_id] = compressed_end
