"""Alternatives to the greedy completion: the model's other likely first tokens, each continued
greedily for a few tokens, all in one short batched decode once the greedy decode has ended.

The rule:
- A branch starts at the first decoded position, from a runner-up of the logits the prompt's
  prefill already computed (under the same allowed tokens: token healing), when that token is at
  least RUNNER_UP_RATIO as likely as the greedy one. Stop tokens never start a branch.
- All branches step together: one forward pass per step, one row per branch, on the decoder's own
  cache. Token i of a branch sits at position prompt_len + i and attends to the prompt and to the
  branch's earlier tokens only (a 4D mask), so its logits are the model's after prompt + branch:
  each branch is greedy decoding from its first token. The greedy completion's tokens are in the
  cache too but masked out; the rows added are cropped when branching ends, so the cache the
  decoder keeps for the buffer is the one greedy decoding left.
- A branch stops like greedy decoding does (stop tokens, the text-level stop rule) or at
  BranchRules.max_tokens. All stop before a step that would end past BranchRules.until(greedy
  tokens), judged by the last step's time (the first by a greedy step's or the last request's
  step of alternatives, the longer); it is asked once when branching would start (the caller
  puts its first-response deadline and a time cap there, and skips branching where the greedy
  text trims to nothing: no first item, no others).
  Nothing branches after a cancelled or timed-out decode.
- It runs after the greedy tokens are final and touches neither them nor the kept cache's
  contents: the first item is the same with alternatives on or off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .decoder import Branch, Run, StopRules, pick, record_token
from .kv_cache import plain_layer

if TYPE_CHECKING:
    from .kv_cache import Cache

# A runner-up first token starts a branch when it is at least this likely next to the greedy one:
# a beginning the model found nearly as plausible, not the tail of the distribution.
RUNNER_UP_RATIO = 0.1


def branch_off(run: Run, trunk: Any, cache: Cache, first_logits: torch.Tensor, device: Any) -> None:
    """After a decoder's greedy loop: marks the tokens final (run.decoded) and fills
    run.result.alternatives as the call's BranchRules ask. `cache` holds the prompt first;
    `first_logits` [V] are the prefill's last row (the first decoded position's)."""
    run.decoded()
    rules, result = run.branches, run.result
    if rules is None or rules.count <= 0 or result.stop_reason in ("cancelled", "time"):
        return
    until = rules.until(result.tokens)
    if time.monotonic() >= until or not branchable(cache):
        return
    started = time.perf_counter()
    allowed = run.allowed_tokens([]) if run.allowed_tokens else None
    firsts = runner_ups(first_logits, allowed, rules.count, run.rules.stop_token_ids)
    if firsts:
        stops = StopRules(
            max_new_tokens=min(rules.max_tokens, run.rules.max_new_tokens),
            stop_token_ids=run.rules.stop_token_ids,
            should_stop=run.rules.should_stop,
        )
        result.alternatives = decode_branches(
            trunk,
            cache,
            len(run.prompt_ids),
            firsts,
            stops=stops,
            run=run,
            until=until,
            device=device,
            step_s=run.step_seconds(),
        )
    result.stats["alternativesMs"] = round((time.perf_counter() - started) * 1000, 2)


def branchable(cache: Cache) -> bool:
    """Rows can be added to this cache and cropped again: plain full-attention layers only."""
    return all(plain_layer(layer) for layer in cache.layers)


def runner_ups(
    logits: torch.Tensor,
    allowed: Sequence[int] | None,
    count: int,
    stop_token_ids: frozenset[int],
) -> list[int]:
    """Up to `count` first tokens beside the greedy one from the first position's logits [V],
    likeliest first, each at least RUNNER_UP_RATIO as likely as the greedy token."""
    ids = None if allowed is None else torch.as_tensor(list(allowed), dtype=torch.long)
    scores = logits.float() if ids is None else logits.float()[ids.to(logits.device)]  # [A]
    k = min(count + 1 + len(stop_token_ids), scores.numel())
    top, where = torch.topk(scores, k)  # [k]
    floor = float(top[0]) + math.log(RUNNER_UP_RATIO)
    out: list[int] = []
    for score, index in zip(top.tolist()[1:], where.tolist()[1:], strict=True):
        if score < floor or len(out) == count:
            break
        token = int(index) if ids is None else int(ids[index])
        if token not in stop_token_ids:
            out.append(token)
    return out


def branch_mask(prompt_len: int, past: int, rows: int, steps: int, device: Any) -> torch.Tensor:
    """[rows, past + steps * rows] bool, for the pass of step `steps`: row j sees the prompt and
    its own column of every step's block (the cache holds `past` entries, then those blocks)."""
    mask = torch.zeros(rows, past + steps * rows, dtype=torch.bool, device=device)
    mask[:, :prompt_len] = True
    own = torch.eye(rows, dtype=torch.bool, device=device)
    for step in range(steps):
        mask[:, past + step * rows : past + (step + 1) * rows] = own
    return mask


@torch.inference_mode()
def decode_branches(
    trunk: Any,
    cache: Cache,
    prompt_len: int,
    firsts: list[int],
    *,
    stops: StopRules,
    run: Run,
    until: float,
    device: Any,
    step_s: float = 0.0,
) -> list[Branch]:
    """Each first token continued greedily (under run.allowed_tokens), every branch a row of one
    pass per step, until all ended or the next step would end past `until` (time.monotonic(),
    judged by the last step's time; before the first, by `step_s` (a greedy step's) or the last
    request's step, the longer). The cache is as it was after."""
    branches = [Branch(tokens=[]) for _ in firsts]
    live: list[bool] = []
    for branch, token in zip(branches, firsts, strict=True):
        reason = record_token(token, branch.tokens, stops)
        branch.ended = reason in ("eos", "stop")
        live.append(reason is None)
    past = cache.get_seq_length()
    rows = len(branches)
    step = 0
    # A step is begun only when one as long as the last one ends by `until`; before the first,
    # the longer of a greedy step and the last request's step of alternatives.
    last_step_s = max(step_s, trunk.branch_step_s)
    try:
        while any(live) and time.monotonic() + last_step_s < until:
            started = time.monotonic()
            step += 1
            ids = torch.tensor([[b.tokens[-1] for b in branches]], device=device)  # [1, rows]
            positions = torch.full((rows,), prompt_len + step - 1, device=device)  # [rows]
            mask = branch_mask(prompt_len, past, rows, step, device)
            logits = trunk.logits(trunk(ids, cache, positions=positions, mask=mask))  # [rows, V]
            for j, branch in enumerate(branches):
                if not live[j]:
                    continue
                allowed = run.allowed_tokens(branch.tokens) if run.allowed_tokens else None
                reason = record_token(pick(logits[j], allowed), branch.tokens, stops)
                branch.ended = reason in ("eos", "stop")
                live[j] = reason is None
            last_step_s = time.monotonic() - started
            trunk.branch_step_s = last_step_s
    finally:
        added = cache.get_seq_length() - past
        if added > 0:
            cache.crop(-added)  # a negative count: the entries to drop
    return [b for b in branches if b.tokens]
