"""One completion at a cursor: context -> prompt -> decode -> post-process."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from memosight_lsp.config import Settings
from memosight_lsp.context import PackedContext, Rerank, build_context
from memosight_lsp.engine import compression_policy
from memosight_lsp.engine.chunk_scoring import model_text_scorer
from memosight_lsp.engine.compressed_decode import CompressedDraftDecoder, SnapKVDecoder
from memosight_lsp.engine.fused_trunk import FusedTrunk, trunk_for
from memosight_lsp.engine.greedy import Generation, StopRules, greedy_generate
from memosight_lsp.engine.loading import LoadedModel, position_limit
from memosight_lsp.engine.speculative import SpeculativeDecoder
from memosight_lsp.workspace.files import indexable_text

from . import postprocess
from .healing import HealingConstraint, VocabularyText
from .policy import CursorSituation, describe_cursor, mid_word_refusal, wants_multiline
from .positions import split_at
from .prompt import MARKER_RESERVE, Prompt, build_prompt
from .syntax import inside_expression

if TYPE_CHECKING:
    from memosight_lsp.workspace import WorkspaceIndex


# Tokens of other open buffers indexed for drafting (indexing measured 1.3 us per token, once).
MAX_DRAFT_BUFFER_TOKENS = 65_536

# The request's defaults are the settings' defaults (config.py), so the two cannot drift.
_DEFAULTS = Settings()


@dataclass(frozen=True, kw_only=True)
class CompletionRequest:
    text: str  # the whole document
    line: int  # 0-based
    column: int  # str index into the line (not UTF-16)
    path: str | None = None
    language_id: str | None = None
    buffer_id: str | None = None  # the per-buffer state key (an LSP uri)
    max_new_tokens: int = _DEFAULTS.completion.max_new_tokens
    budget_tokens: int = _DEFAULTS.context.budget_tokens
    multiline: str = _DEFAULTS.completion.multiline
    mid_word: str = _DEFAULTS.completion.mid_word
    plain: bool = not _DEFAULTS.completion.speculative  # plain greedy decoding, no acceleration
    # KV compression for long prompts; engine/compression_policy.py decides where it runs.
    kv_compression: compression_policy.KvMode = _DEFAULTS.compression.kv_compression
    kv_ratio: int = _DEFAULTS.compression.kv_ratio
    min_prompt_tokens: int = _DEFAULTS.compression.min_prompt_tokens
    # Cross-file context: the workspace index holding this file (None: the current file only),
    # other open buffers {path: text}, and recent edits [(path, 0-based line)], oldest first.
    index: WorkspaceIndex | None = None
    open_buffers: Mapping[str, str] = field(default_factory=dict)
    recent_edits: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, **request: Any) -> CompletionRequest:
        """A request under these settings; `request` gives the rest (text, line, column, ...).
        from_settings(Settings(), ...) equals the defaults above (tests/test_config.py)."""
        return cls(
            max_new_tokens=settings.completion.max_new_tokens,
            budget_tokens=settings.context.budget_tokens,
            multiline=settings.completion.multiline,
            mid_word=settings.completion.mid_word,
            plain=not settings.completion.speculative,
            kv_compression=settings.compression.kv_compression,
            kv_ratio=settings.compression.kv_ratio,
            min_prompt_tokens=settings.compression.min_prompt_tokens,
            **request,
        )


@dataclass(kw_only=True)
class Completion:
    text: str  # insert at the cursor
    reason: str | None = None  # why there is no completion, when text is empty
    multiline: bool = False
    new_tokens: int = 0
    prompt_tokens: int = 0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0
    stop_reason: str = ""
    model: str = ""
    raw: str = ""  # the decoded model output before trimming
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "reason": self.reason,
            "multiline": self.multiline,
            "new_tokens": self.new_tokens,
            "prompt_tokens": self.prompt_tokens,
            "prefill_ms": round(self.prefill_ms, 2),
            "decode_ms": round(self.decode_ms, 2),
            "total_ms": round(self.total_ms, 2),
            "stop_reason": self.stop_reason,
            "model": self.model,
            **({"stats": self.stats} if self.stats else {}),
        }


Decoder = Callable[..., Generation]


@dataclass(frozen=True)
class CursorPlan:
    situation: CursorSituation
    multiline: bool  # a block is wanted here, not one line
    refused: str | None  # why not to complete here (None: go on)


def plan_cursor(request: CompletionRequest) -> CursorPlan:
    """What the cursor is in and what kind of completion it wants: the same for every engine."""
    prefix, suffix = split_at(request.text, request.line, request.column)
    syntax = (
        inside_expression(prefix, suffix, path=request.path, language_id=request.language_id)
        if request.multiline == "auto"
        else None
    )
    situation = describe_cursor(prefix, suffix, in_expression=syntax)
    return CursorPlan(
        situation=situation,
        multiline=wants_multiline(situation, request.multiline),
        refused=mid_word_refusal(situation, request.mid_word),
    )


def pack_context(
    request: CompletionRequest,
    budget: int,
    count_tokens: Callable[[str], int],
    rerank: Rerank | None = None,
) -> PackedContext:
    """The ranked workspace context at the request's cursor, packed into `budget` tokens."""
    return build_context(
        text=request.text,
        path=request.path,
        line=request.line,
        column=request.column,
        language_id=request.language_id,
        budget_tokens=budget,
        count_tokens=count_tokens,
        # A huge or binary text is not parsed for ranking: it gets its own lines only.
        index=request.index if indexable_text(request.text) else None,
        open_buffers=request.open_buffers,
        recent_edits=request.recent_edits,
        rerank=rerank,
    )


class CompletionEngine:
    """Completes at a cursor with one loaded model. Not thread-safe: one worker calls it."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        decoder: Decoder | None = None,
        speculative: bool = True,
        compression: compression_policy.Thresholds | None = None,
        time_passes: bool = True,
    ) -> None:
        self.loaded = loaded
        # Speculative decoding gives the same tokens as greedy, faster; request.plain opts out.
        # time_passes=False (one-shot use): no timing on the machine (~1 s with the embedded
        # model), default pass costs and F.linear products; same tokens.
        self.decoder = decoder or (
            SpeculativeDecoder(calibrate=time_passes) if speculative else greedy_generate
        )
        if not time_passes and isinstance(trunk := trunk_for(loaded.model), FusedTrunk):
            trunk.skip_timing()
        # Policy thresholds; each request's minPromptTokens and kvRatio override theirs.
        self.compression = compression or compression_policy.Thresholds()
        # One compressed decoder per KV mode (each keeps per-buffer caches), rebuilt when the
        # ratio changes: kv mode -> (ratio, decoder).
        self._compressed: dict[str, tuple[int, Decoder]] = {}
        # Token ids of the other open buffers, the `workspace` draft source: (path, hash) -> ids.
        self._buffer_ids: dict[tuple[str, int], list[int]] = {}
        self._buffer_keys: list[tuple[str, int]] = []

    def warm_up(self, request: CompletionRequest | None = None) -> None:
        """Do now what the decoder would time on its first completion (pass costs, the trunk's
        row kernels), for prompts the size of `request`'s budget (default settings if None)."""
        cost = getattr(self.decoder, "cost", None)
        if cost is not None:
            request = request or CompletionRequest(text="", line=0, column=0)
            cost(self.loaded.model, self.context_budget(request))

    @cached_property
    def vocabulary(self) -> VocabularyText:
        return VocabularyText(self.loaded.tokenizer)

    def count_tokens(self, text: str) -> int:
        return len(self.loaded.tokenizer.encode(text, add_special_tokens=False))

    def context_budget(self, request: CompletionRequest) -> int:
        limit = position_limit(self.loaded.model.config) or 2048
        room = limit - request.max_new_tokens - MARKER_RESERVE
        return max(16, min(request.budget_tokens, room))

    def prepare(self, request: CompletionRequest) -> Prompt:
        """The prompt at the cursor: ranked workspace context packed into the budget."""
        budget = self.context_budget(request)
        packed = pack_context(request, budget, self.count_tokens, self.chunk_rerank(budget))
        return build_prompt(packed, self.loaded.fim)

    def chunk_rerank(self, budget: int) -> Rerank | None:
        """The model as second-stage context ranker, where the policy allows it."""
        if compression_policy.chunk_scoring_refusal(budget, self.loaded.model, self.compression):
            return None
        return Rerank(
            score=model_text_scorer(self.loaded),
            max_candidates=self.compression.chunk_max_candidates,
            min_overflow=self.compression.chunk_min_overflow,
        )

    def complete(
        self, request: CompletionRequest, *, cancelled: Callable[[], bool] | None = None
    ) -> Completion:
        started = time.perf_counter()
        cursor = plan_cursor(request)
        if cursor.refused is not None:
            return Completion(text="", reason=cursor.refused)
        situation, multiline = cursor.situation, cursor.multiline
        prompt = self.prepare(request)
        tokenizer = self.loaded.tokenizer
        prompt_ids = tokenizer.encode(prompt.text, add_special_tokens=True)
        healed = prompt.healed

        def generated_text(tokens) -> str:
            return tokenizer.decode(list(tokens))[len(healed) :]

        rules = StopRules(
            max_new_tokens=request.max_new_tokens,
            stop_token_ids=self.loaded.stop_token_ids,
            should_stop=lambda tokens: postprocess.should_stop(
                generated_text(tokens), situation, multiline
            ),
            cancelled=cancelled,
        )
        constraint = HealingConstraint(healed, self.vocabulary, tokenizer) if healed else None
        plan = self.plan(request, len(prompt_ids))
        decode = greedy_generate if request.plain else self._decoder_for(request, plan)
        self._draft_from_open_buffers(decode, request)
        # Per-buffer decoders keep the KV cache and last suggestion of each buffer.
        extra = {"buffer_id": request.buffer_id} if getattr(decode, "per_buffer", False) else {}
        generation = decode(
            self.loaded.model, prompt_ids, rules, allowed_tokens=constraint, **extra
        )
        raw = generated_text(generation.tokens)
        text = (
            ""
            if generation.stop_reason == "cancelled"
            else postprocess.finish(raw, situation, multiline)
        )
        return Completion(
            text=text,
            reason=None if text else self._empty_reason(generation),
            multiline=multiline,
            new_tokens=len(generation.tokens),
            prompt_tokens=len(prompt_ids),
            prefill_ms=generation.prefill_ms,
            decode_ms=generation.decode_ms,
            total_ms=(time.perf_counter() - started) * 1000,
            stop_reason=generation.stop_reason,
            model=self.loaded.name,
            raw=raw,
            stats=self._stats(request, generation, plan, prompt),
        )

    @staticmethod
    def _stats(
        request: CompletionRequest,
        generation: Generation,
        plan: compression_policy.Plan,
        prompt: Prompt,
    ) -> dict[str, Any]:
        stats = dict(generation.stats)
        if request.kv_compression != "off" and not request.plain:
            stats["compression"] = _kv_decision(plan)
        if prompt.context.reranked:
            stats["contextModelScored"] = True
        return stats

    def plan(self, request: CompletionRequest, prompt_tokens: int) -> compression_policy.Plan:
        """Which compression runs for this request (the policy's decision, with reasons)."""
        thresholds = replace(
            self.compression,
            kv_min_prompt_tokens=request.min_prompt_tokens,
            kv_ratio=float(request.kv_ratio),
        )
        return compression_policy.plan(
            requested_kv=request.kv_compression,
            prompt_tokens=prompt_tokens,
            budget_tokens=self.context_budget(request),
            model=self.loaded.model,
            thresholds=thresholds,
        )

    def _draft_from_open_buffers(self, decoder: Decoder, request: CompletionRequest) -> None:
        """The other open buffers as the decoder's `workspace` drafts (code is often typed
        again from a file open next to it). Encoded once per buffer content."""
        feed = getattr(decoder, "set_workspace_tokens", None)
        if feed is None:
            return
        keys = [(path, hash(text)) for path, text in sorted(request.open_buffers.items())]
        if keys == self._buffer_keys:
            return  # the same buffers as last time: the decoder has them
        self._buffer_keys = keys
        known = self._buffer_ids
        self._buffer_ids = {}
        room = MAX_DRAFT_BUFFER_TOKENS
        for key in keys:
            if room <= 0:
                break
            ids = known.get(key)
            if ids is None:
                text = request.open_buffers[key[0]][: room * 8]  # no more than fits the room
                ids = self.loaded.tokenizer.encode(text, add_special_tokens=False)[:room]
            self._buffer_ids[key] = ids
            room -= len(ids)
        feed(list(self._buffer_ids.values()))

    def forget(self, buffer_id: str) -> None:
        """Drop a closed buffer's KV cache and last suggestion from every per-buffer decoder."""
        for decoder in [self.decoder, *(d for _, d in self._compressed.values())]:
            forget = getattr(decoder, "forget", None)
            if forget is not None:
                forget(buffer_id)

    def _decoder_for(self, request: CompletionRequest, plan: compression_policy.Plan) -> Decoder:
        if plan.kv_mode == "off" or plan.kv_config is None:
            return self.decoder
        ratio, decoder = self._compressed.get(plan.kv_mode, (0, self.decoder))
        if ratio != request.kv_ratio:
            kind = CompressedDraftDecoder if plan.kv_mode == "lossless-draft" else SnapKVDecoder
            decoder = kind(config=plan.kv_config)
            self._compressed[plan.kv_mode] = (request.kv_ratio, decoder)
        return decoder

    @staticmethod
    def _empty_reason(generation: Generation) -> str:
        if generation.stop_reason == "cancelled":
            return "the request was superseded or cancelled"
        return "the model suggested nothing useful here (empty after trimming)"


def _kv_decision(plan: compression_policy.Plan) -> dict[str, Any]:
    """The KV part of a plan, for Completion.stats (chunk scoring shows in the prompt's stats)."""
    reasons = [r for r in plan.reasons if r.startswith("kv:")]
    return {"kvMode": plan.kv_mode, "reason": reasons[0] if reasons else None}
