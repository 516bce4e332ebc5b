"""Plain greedy decoding with a KV cache: the baseline every speed-up is checked against.

Token ids in, token ids out. The caller supplies the stop rules (token ids, a text-level check)
and an optional constraint on the first tokens (token healing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .branches import branch_off
from .decoder import AllowedTokens, Decoder, Generation, Run, StopRules
from .fused_trunk import FusedTrunk, HFTrunk, prepare_trunk

if TYPE_CHECKING:
    from .kv_cache import Cache


@torch.inference_mode()
def forward(
    trunk: HFTrunk | FusedTrunk,
    input_ids: torch.Tensor,
    cache: Cache,
    *,
    last_only: bool = False,
    prefill: bool = False,
) -> torch.Tensor:
    """Run new tokens [1, S] on top of the cache; returns logits [S, V] ([1, V] if last_only).
    `prefill`: prompt tokens (see HFTrunk.__call__)."""
    hidden = trunk(input_ids, cache, prefill=prefill)  # [S, H]
    return trunk.logits(hidden[-1:] if last_only else hidden)


class GreedyDecoder(Decoder):
    """One forward pass per token on a fresh cache; keeps nothing between calls."""

    def generate(self, run: Run) -> None:
        trunk = prepare_trunk(run.model)
        device = next(run.model.parameters()).device
        cache = run.new_cache()

        def step(ids: Sequence[int]) -> torch.Tensor:
            prompt = torch.tensor([list(ids)], device=device)  # [1, S]
            return forward(trunk, prompt, cache, last_only=True, prefill=True)[-1]  # [V]

        logits = run.prefill(step, cache, 0)
        if logits is None:  # cancelled while prefilling
            return
        first = logits  # [V]: the alternatives start here
        while (token := run.take_next(logits)) is not None:
            logits = forward(trunk, torch.tensor([[token]], device=device), cache)[-1]  # [V]
            run.result.forward_passes += 1
        branch_off(run, trunk, cache, first, device)


def greedy_generate(
    model: Any,
    prompt_ids: Sequence[int],
    rules: StopRules,
    *,
    allowed_tokens: AllowedTokens | None = None,
) -> Generation:
    return GreedyDecoder()(model, prompt_ids, rules, allowed_tokens=allowed_tokens)
