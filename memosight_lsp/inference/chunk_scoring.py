"""Model-scored context chunks (LongCodeZip / LLMLingua style): keep what lowers perplexity.

A candidate chunk is worth its room when the model predicts the code around the cursor better
with it than without it:

    gain(chunk) = NLL(target | local) - NLL(target | chunk + local)   (mean nats per target token)

where `target` is the code right above the cursor (the best stand-in for what comes next that
is known at request time) and `local` a few lines before it (optional). `local` matters: with
no context at all, any chunk "helps" the first target tokens, and that generic gain drowns the
chunk-specific one. One forward pass per chunk over [chunk + local + target], logits kept for
the target rows only. This is a second-stage ranker: the structural ranker proposes candidates, this
orders them when there are more than fit. Token ids in, scores out; `text_scorer` adapts it to
the `(chunks, target) -> scores` callable the context packer takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from .loading import LoadedModel

# chunk texts, target text -> one score per chunk (higher: keep first)
TextScorer = Callable[[Sequence[str], str], list[float]]
LOCAL_LINES = 4  # lines of the target text used as `local` context rather than scored


class ChunkScorer:
    """Scores chunks by the perplexity they remove from a target. Not thread-safe."""

    def __init__(
        self,
        model: Any,
        *,
        bos_id: int | None = None,
        max_chunk_tokens: int = 512,
        max_target_tokens: int = 64,
    ) -> None:
        self.model = model
        self.bos_id = bos_id
        self.max_chunk_tokens = max_chunk_tokens
        self.max_target_tokens = max_target_tokens
        self.device = next(model.parameters()).device
        self.passes = 0

    @torch.inference_mode()
    def nll(self, context_ids: Sequence[int], target_ids: Sequence[int]) -> float:
        """Mean negative log-likelihood (nats/token) of target after context."""
        head = ([self.bos_id] if self.bos_id is not None else []) + list(context_ids)
        if not head:  # the first target token has nothing to be predicted from: score the rest
            head, target_ids = list(target_ids[:1]), target_ids[1:]
        target = list(target_ids)
        if not target:
            return 0.0
        ids = torch.tensor([head + target], device=self.device)  # [1, C+T]
        # Rows C-1 .. C+T-2 predict the target tokens.
        logits = self.model(input_ids=ids, logits_to_keep=len(target) + 1).logits[0, :-1]
        self.passes += 1
        labels = torch.tensor(target, device=self.device)
        return float(F.cross_entropy(logits.float(), labels))

    def score(
        self,
        chunks: Sequence[Sequence[int]],
        target_ids: Sequence[int],
        local_ids: Sequence[int] = (),
    ) -> list[float]:
        """Perplexity gain (nats/token) of each chunk on the target; higher is more useful."""
        target = list(target_ids)[-self.max_target_tokens :]
        if not target:
            return [0.0] * len(chunks)
        local = list(local_ids)
        baseline = self.nll(local, target)
        # Keep a chunk's tail when it is too long: its end sits next to the target in a prompt.
        return [
            baseline - self.nll(list(c)[-self.max_chunk_tokens :] + local, target) for c in chunks
        ]


def text_scorer(scorer: ChunkScorer, encode: Callable[[str], list[int]]) -> TextScorer:
    """Adapts a ChunkScorer to texts, for the context packer (which imports no torch)."""

    def score(chunks: Sequence[str], target: str) -> list[float]:
        # The first lines condition, the rest is scored (see the module doc on `local`).
        lines = target.splitlines(keepends=True)
        local = "".join(lines[: min(LOCAL_LINES, len(lines) // 2)])
        scored = target[len(local) :]
        return scorer.score([encode(c) for c in chunks], encode(scored), encode(local))

    return score


def model_text_scorer(loaded: LoadedModel) -> TextScorer:
    """A loaded model's chunk scorer over texts, encoded with its own tokenizer."""
    tokenizer = loaded.tokenizer
    scorer = ChunkScorer(loaded.model, bos_id=tokenizer.bos_token_id)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    return text_scorer(scorer, encode)


def rerank(
    texts: Sequence[str], target: str, scorer: TextScorer, *, keep: int | None = None
) -> list[int]:
    """Indices of `texts`, most useful first (stable for ties); the first `keep` when given."""
    scores = scorer(texts, target)
    order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
    return order if keep is None else order[:keep]
