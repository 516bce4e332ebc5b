"""When each compression stage runs: only where `memosight bench compress` measured a gain.

What `memosight bench compress` found on a CPU (figures: docs/compression.md,
docs/speculative.md):
- SnapKV scoring adds a fixed cost on top of the full prefill (capturing the window queries and
  one [w x n] softmax per layer) and saves a little attention per generated token; the saving is
  worth it only when the prompt is long: below ~2k tokens the KV cache is a few MB and decoding
  cost is dominated by the per-layer framework overhead, not by attention over the cache.
- Lossy SnapKV changes outputs, so it never turns on by itself: the user picks "lossy-snapkv".
  "lossless-draft" cannot change outputs; it pays when a draft pass on the small cache is much
  cheaper than a verify pass on the full one (long prompts, larger models, GPU); on CPU it was
  measured slower than plain decoding, so there it stays off unless `lossless_on_cpu`.
- Model-scored chunk ranking costs one forward pass per candidate; it runs only when the
  structural ranker offers clearly more than fits and the budget is large.
- Far-prefix summaries (recursive compression of a long file: blocks step down to signatures,
  then drop) run in the context packer whenever a file without an index overflows its room:
  string work, no model passes. `Plan.recursive` only reports that the ranked candidates
  overflow the budget; the packer's per-definition levels then decide what stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .kv_compress import SnapKVConfig, unsupported_reason


def _on_cpu(model: Any) -> bool:
    if model is None:
        return False
    return next(model.parameters()).device.type == "cpu"


KvMode = Literal["off", "lossless-draft", "lossy-snapkv"]


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    kv_min_prompt_tokens: int = 2048  # below: compression overhead > savings (measured)
    kv_ratio: float = 4.0
    # Measured slower than plain greedy on CPU (a draft pass costs about a verify pass when
    # per-layer overhead dominates); allowed on accelerators, where steps are attention-bound.
    lossless_on_cpu: bool = False
    chunk_min_budget_tokens: int = 2048  # small budgets: the structural ranker is enough
    chunk_min_overflow: float = 1.5  # candidate tokens / room before model scoring pays
    chunk_max_candidates: int = 32  # one forward pass each: cap the latency
    # One pass per candidate: too slow for a keystroke on a CPU (docs/compression.md); allowed
    # on accelerators.
    chunk_on_cpu: bool = False


@dataclass(kw_only=True)
class Plan:
    kv_mode: KvMode = "off"
    kv_config: SnapKVConfig | None = None
    chunk_scoring: bool = False
    recursive: bool = False
    reasons: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        return {
            "kvMode": self.kv_mode,
            "kvRatio": self.kv_config.ratio if self.kv_config else None,
            "chunkScoring": self.chunk_scoring,
            "recursive": self.recursive,
            "reasons": self.reasons,
        }


def plan(
    *,
    requested_kv: KvMode,
    prompt_tokens: int,
    budget_tokens: int,
    candidate_tokens: int = 0,
    candidates: int = 0,
    model: Any = None,
    thresholds: Thresholds | None = None,
) -> Plan:
    """Which stages run for one request; every decision gives its reason."""
    t = thresholds or Thresholds()
    out = Plan()
    if requested_kv == "off":
        out.reasons.append("kv: off in settings")
    elif prompt_tokens < t.kv_min_prompt_tokens:
        out.reasons.append(f"kv: prompt {prompt_tokens} < {t.kv_min_prompt_tokens} tokens")
    elif model is not None and (why := unsupported_reason(model)):
        out.reasons.append(f"kv: {why}")
    elif requested_kv == "lossless-draft" and not t.lossless_on_cpu and _on_cpu(model):
        out.reasons.append("kv: lossless-draft is slower than plain decoding on CPU (measured)")
    else:
        out.kv_mode = requested_kv
        out.kv_config = SnapKVConfig(ratio=t.kv_ratio)
        out.reasons.append(f"kv: {requested_kv} at {t.kv_ratio:g}x")
    overflow = candidate_tokens / max(budget_tokens, 1)
    out.recursive = candidate_tokens > budget_tokens
    if why_not := chunk_scoring_refusal(budget_tokens, model, t):
        out.reasons.append(f"chunks: {why_not}")
    elif overflow < t.chunk_min_overflow:
        out.reasons.append(f"chunks: candidates fill {overflow:.2f}x of the budget")
    elif candidates > t.chunk_max_candidates:
        out.reasons.append(f"chunks: {candidates} candidates > {t.chunk_max_candidates}")
    else:
        out.chunk_scoring = True
        out.reasons.append(f"chunks: model-scored ({candidates} candidates, {overflow:.2f}x)")
    return out


def chunk_scoring_refusal(budget_tokens: int, model: Any, thresholds: Thresholds) -> str | None:
    """Why the context packer may not ask the model to score chunks; None when it may (it
    then asks only when the candidates overflow the room, see context.Rerank)."""
    if budget_tokens < thresholds.chunk_min_budget_tokens:
        return f"budget {budget_tokens} < {thresholds.chunk_min_budget_tokens}"
    if not thresholds.chunk_on_cpu and _on_cpu(model):
        return "one model pass per chunk is too slow on CPU (measured)"
    return None
