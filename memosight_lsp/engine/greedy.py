"""Plain greedy decoding with a KV cache: the baseline every speed-up is checked against.

Token ids in, token ids out. The caller supplies the stop rules (token ids, a text-level check)
and an optional constraint on the first tokens (token healing).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from .fused_trunk import prepare_trunk
from .kv_cache import new_cache

# Tokens allowed next, given the tokens generated so far; None means any token.
AllowedTokens = Callable[[Sequence[int]], Sequence[int] | None]


@dataclass(kw_only=True)
class StopRules:
    max_new_tokens: int
    stop_token_ids: frozenset[int] = frozenset()
    # Called after each accepted token with all new tokens; True ends generation (stop strings).
    should_stop: Callable[[Sequence[int]], bool] | None = None
    # Polled between forward passes; True abandons the generation (superseded request).
    cancelled: Callable[[], bool] | None = None


@dataclass(kw_only=True)
class Generation:
    tokens: list[int]  # new tokens, without the stop token
    prompt_tokens: int
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    forward_passes: int = 0
    stop_reason: str = "max_tokens"  # max_tokens | eos | stop | cancelled
    stats: dict = field(default_factory=dict)  # accelerator details (accepted tokens per pass...)


@torch.inference_mode()
def forward(
    model, input_ids: torch.Tensor, cache: DynamicCache, *, last_only: bool = False
) -> torch.Tensor:
    """Run new tokens [1, S] on top of the cache; returns logits [S, V] ([1, V] if last_only)."""
    trunk = prepare_trunk(model)
    hidden = trunk(input_ids, cache)  # [S, H]
    return trunk.logits(hidden[-1:] if last_only else hidden)


def pick(logits: torch.Tensor, allowed: Sequence[int] | None) -> int:
    """argmax over the vocabulary, or over the allowed ids only."""
    if allowed is None:
        return int(torch.argmax(logits))
    index = torch.as_tensor(list(allowed), dtype=torch.long, device=logits.device)
    return int(index[torch.argmax(logits[index])])


def stop_reason_for(token: int, new_tokens: list[int], rules: StopRules) -> str | None:
    """Appends token unless it is a stop token; returns why generation ends, if it does."""
    if token in rules.stop_token_ids:
        return "eos"
    new_tokens.append(token)
    if rules.should_stop is not None and rules.should_stop(new_tokens):
        return "stop"
    if len(new_tokens) >= rules.max_new_tokens:
        return "max_tokens"
    return None


def take_next(
    logits: torch.Tensor,
    result: Generation,
    rules: StopRules,
    allowed_tokens: AllowedTokens | None,
) -> int | None:
    """The greedy next token from logits [V], recorded in result; None once generation ends
    (result.stop_reason then says why). Every decoder steps through this, so all stop alike."""
    allowed = allowed_tokens(result.tokens) if allowed_tokens else None
    token = pick(logits, allowed)
    reason = stop_reason_for(token, result.tokens, rules)
    if reason is None and rules.cancelled is not None and rules.cancelled():
        reason = "cancelled"
    if reason is not None:
        result.stop_reason = reason
        return None
    return token


def greedy_generate(
    model,
    prompt_ids: Sequence[int],
    rules: StopRules,
    *,
    allowed_tokens: AllowedTokens | None = None,
) -> Generation:
    device = next(model.parameters()).device
    result = Generation(tokens=[], prompt_tokens=len(prompt_ids))
    if rules.max_new_tokens <= 0 or not prompt_ids:
        return result
    cache = new_cache(model)
    started = time.perf_counter()
    prompt = torch.tensor([list(prompt_ids)], device=device)  # [1, S]
    logits = forward(model, prompt, cache, last_only=True)[-1]  # [V]
    result.forward_passes = 1
    prefilled = time.perf_counter()
    result.prefill_ms = (prefilled - started) * 1000
    while (token := take_next(logits, result, rules, allowed_tokens)) is not None:
        logits = forward(model, torch.tensor([[token]], device=device), cache)[-1]  # [V]
        result.forward_passes += 1
    result.decode_ms = (time.perf_counter() - prefilled) * 1000
    return result
