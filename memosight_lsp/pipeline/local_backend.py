"""One completion at a cursor: context -> prompt -> decode -> post-process.

Latency (pipeline/latency.py): a cold prompt is sized to the model's measured prefill rate and
`first_response_ms`; the prompt's head is pinned per buffer (stable_prompt.py) so a keystroke
prefills only what follows its edit; `complete` hands what is verified by a deadline to
`on_partial` and decodes on; `prewarm` prefills a cursor's prompt ahead of the first request.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any

from memosight_lsp.context import Rerank
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.inference import compression_policy, fast_tokenizer, machine
from memosight_lsp.inference.chunk_scoring import model_text_scorer
from memosight_lsp.inference.compressed_decode import CompressedDraftDecoder, SnapKVDecoder
from memosight_lsp.inference.core_share import CoreShare
from memosight_lsp.inference.decoder import (
    AllowedTokens,
    BranchRules,
    Decoder,
    Generation,
    StopRules,
)
from memosight_lsp.inference.fused_trunk import FusedTrunk, prepare_trunk
from memosight_lsp.inference.greedy import GreedyDecoder
from memosight_lsp.inference.loading import LoadedModel, position_limit
from memosight_lsp.inference.speculative import SpeculativeDecoder

from . import alternatives, postprocess, readings, second_try
from .calibration import Calibrator
from .healing import HealingConstraint, VocabularyText
from .latency import MIN_CHUNK_TOKENS, LatencyBudget, PrefillRate, latency_budget
from .policy import CursorSituation
from .prompt import MARKER_RESERVE, Prompt, build_prompt
from .request import (
    Completion,
    CompletionRequest,
    Deadline,
    PartialListener,
    pack_context,
    plan_of,
)
from .stable_prompt import StablePrompts

# Tokens of other open buffers indexed for drafting: bounds the indexing's cost (docs/latency.md).
MAX_DRAFT_BUFFER_TOKENS = 65_536
# Alternatives (inference/branches.py): most tokens of one, its first included (where the model
# hesitated at the start; the greedy item carries the long suggestion), and the most time their
# decode takes after the greedy one: ALTERNATIVES_MS, and for a request with a first-response
# deadline no more than ALTERNATIVES_SHARE of the time it took until then (the items after the
# first cost at most a tenth more than one item: issue 28), nor past that deadline.
ALTERNATIVE_TOKENS = 8
ALTERNATIVES_MS = 60.0
ALTERNATIVES_SHARE = 0.1


class LocalBackend:
    """Completes at a cursor with one loaded model. Not thread-safe: one worker calls it."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        decoder: Decoder | None = None,
        speculative: bool = True,
        compression: compression_policy.Thresholds | None = None,
        time_passes: bool = True,
        share_cores: bool = False,
        busy_since: machine.OtherLoad | None = None,
    ) -> None:
        self.loaded = loaded
        # share_cores (the server): each request runs on the cores other processes leave free
        # (inference/core_share.py).
        # busy_since: the first window of that measure (the model load's start).
        self.cores = None
        if share_cores and loaded.device.type == "cpu":
            self.cores = CoreShare(since=busy_since)
        # Speculative decoding gives the same tokens as greedy, faster; request.plain opts out.
        # time_passes=False (one-shot use): no timing on the machine (a pause one completion
        # does not repay), default pass costs and F.linear products; same tokens.
        self.decoder = decoder or (
            SpeculativeDecoder(calibrate=time_passes) if speculative else GreedyDecoder()
        )
        if not time_passes and isinstance(trunk := prepare_trunk(loaded.model), FusedTrunk):
            trunk.skip_timing()
        # Policy thresholds; each request's minPromptTokens and kvRatio override theirs.
        self.compression = compression or compression_policy.Thresholds()
        # One compressed decoder per KV mode (each keeps per-buffer caches), rebuilt when the
        # ratio changes: kv mode -> (ratio, decoder).
        self._compressed: dict[str, tuple[int, Decoder]] = {}
        # Token ids of the other open buffers, the `workspace` draft source: (path, hash) -> ids.
        self._buffer_ids: dict[tuple[str, int], list[int]] = {}
        self._buffer_keys: list[tuple[str, int]] = []
        # Prompt tokens per second: without it prompts take the whole budget (one-shot
        # engines); with it cold prompts follow it (pipeline/latency.py). A timing engine
        # (time_passes) takes it from the calibration, or from its first prefills.
        self.prefill_rate = PrefillRate()
        self.time_passes = time_passes
        # Whether this process has run a prefill yet. Its first one also pays the process's
        # first-call costs (allocations, the kernels' first use) while the person waits for the
        # whole start, so a timing engine's first prompt is small even when the rate is kept.
        self.prefilled = False
        self.stable = StablePrompts()  # per-buffer pinned prompt heads
        # The machine's timings of this model: cached, or measured after the first answer
        # (pipeline/calibration.py; the server's model host applies and schedules them).
        self.calibration = Calibrator(
            loaded,
            self.decoder,
            self.prefill_rate,
            prompt_tokens=self.context_budget(CompletionRequest(text="", line=0, column=0)),
            on_switch=self.drop_kv_caches,
        )

    @property
    def name(self) -> str:
        return self.loaded.name

    def warm_up(self, request: CompletionRequest | None = None) -> None:
        """Time now, before any completion, what the decoding is tuned with (pass costs, the
        trunk's row kernels, the prefill rate), for prompts the size of `request`'s budget
        (default settings if None), and keep it for this machine (`memosight models
        --remeasure`, benchmarks). A server does not wait for this: pipeline/calibration.py."""
        request = request or CompletionRequest(text="", line=0, column=0)
        self.calibration.prompt_tokens = self.context_budget(request)
        self.calibration.measure(fresh=True)
        self.prefilled = True

    def machine_busy(self) -> bool:
        """Whether other processes kept more cores busy when the last request started than the
        timings may be taken beside (calibration.busy_cores: the same rule puts them off and
        keeps them; never known without share_cores)."""
        return self.cores is not None and self.cores.others > self.calibration.busy_cores

    def _share_cores(self) -> None:
        """Run this request on the cores other processes leave free."""
        if self.cores is not None:
            self.cores.adjust()

    def drop_kv_caches(self) -> None:
        """Forget every buffer's kept KV cache (the trunk's kernels changed: a cache is exact
        only for the kernels that computed it)."""
        for decoder in [self.decoder, *(d for _, d in self._compressed.values())]:
            decoder.prefix_cache.clear()

    def latency_budget(self, request: CompletionRequest) -> LatencyBudget:
        """The sizes this request packs and prefills with (pipeline/latency.py)."""
        fim = self.loaded.fim
        return latency_budget(
            self.context_budget(request),
            self.prefill_rate.settled,
            request.first_response_ms,
            suffix_first=fim is not None and fim.suffix_first,
            cautious=self.time_passes and not self.prefilled,  # a process's first prompt
        )

    def latency(self, request: CompletionRequest) -> dict[str, Any]:
        """How prompts are sized now (memosight/stats): the cold prompt, the suffix and prefill
        chunks for `request`'s settings, the measured prefill rate, the pinned heads."""
        return {
            **self.latency_budget(request).describe(),
            "prefillRate": self.prefill_rate.describe(),
            "stablePrompts": self.stable.stats(),
            "calibration": self.calibration.describe(),
        }

    @cached_property
    def vocabulary(self) -> VocabularyText:
        return VocabularyText(self.loaded.tokenizer)

    @cached_property
    def token_counter(self) -> TokenCounter:
        """Counts with a memo of the lines it has seen: most of a keystroke's packing is
        counting lines it counted on the keystroke before."""
        return TokenCounter(self.count_tokens)

    def count_tokens(self, text: str) -> int:
        return len(self.loaded.tokenizer.encode(text, add_special_tokens=False))

    def context_budget(self, request: CompletionRequest) -> int:
        limit = position_limit(self.loaded.model.config) or 2048
        room = limit - request.max_new_tokens - MARKER_RESERVE
        return max(16, min(request.budget_tokens, room))

    def prepare(
        self,
        request: CompletionRequest,
        *,
        budget: LatencyBudget | None = None,
        stable: bool = True,
    ) -> Prompt:
        """The prompt at the cursor: ranked workspace context packed into the budget. A buffer's
        prompt keeps the head it was packed with while it fits (stable_prompt.py); `stable`
        False packs afresh and leaves the buffer's pinned head alone (a one-off budget)."""
        budget = budget or self.latency_budget(request)
        # What the pinned head was packed for: another budget, index (or one that learned of
        # files since: a head pinned mid-scan would miss them for good), file or other open
        # buffers (edited elsewhere: their snippets may be stale), as the editor sent them and
        # as the index holds them (it applies their edits a moment later, on its own thread: a
        # head packed in between would keep the old definitions) packs again. Hashing an
        # unchanged buffer is free (str caches its hash).
        others = tuple(sorted((path, hash(text)) for path, text in request.open_buffers.items()))
        index = request.index
        key = (
            budget.max_prompt_tokens,
            id(index),
            index.revision if index is not None else 0,
            index.buffer_texts(request.path) if index is not None and request.path else (),
            request.path,
            request.language_id,
            others,
            request.packing,
            request.repo_format,
        )
        buffer = request.buffer_id if stable else None
        packed = None
        if buffer is not None:
            packed = self.stable.context(
                buffer,
                key,
                request.text,
                request.line,
                request.column,
                self.token_counter,
                max_tokens=budget.max_prompt_tokens,
                max_suffix=budget.suffix_tokens,
            )
        reused = packed is not None
        if packed is None:
            packed = pack_context(
                request,
                budget.prompt_tokens,
                self.token_counter,
                self.chunk_rerank(budget.prompt_tokens),
                max_suffix_tokens=budget.suffix_tokens,
            )
            if buffer is not None:
                self.stable.pin(buffer, key, request.text, request.line, request.column, packed)
        return build_prompt(
            packed,
            self.loaded.fim,
            budget=budget,
            stable_head=reused,
            repo=self.repo_name(request),
        )

    def repo_name(self, request: CompletionRequest) -> str | None:
        """The repository name of the request's prompt in the repository format, None for path
        marker comments: the request asks for it, has an index and the vocabulary has the
        format's tokens."""
        fim = self.loaded.fim
        if not request.repo_format or request.index is None or fim is None:
            return None
        tokens = (fim.repo_name_token, fim.file_sep_token)
        if not all(t is not None and t in self.token_ids for t in tokens):
            return None
        return request.index.root.name

    @cached_property
    def token_ids(self) -> Mapping[str, int]:
        return fast_tokenizer.token_lookup(self.loaded.tokenizer)

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
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        deadline: Deadline | None = None,
        on_partial: PartialListener | None = None,
    ) -> Completion:
        """The completion at the request's cursor. With `on_partial`, once time.monotonic()
        passes `deadline` (asked at every step when it is a callable) what is verified so far is
        handed to it (on this thread, cut at a line or word end: postprocess.partial), and again
        whenever that changes, while decoding goes on; the Completion returned is the whole one.
        Decoding ends by request.max_wait_ms with what is verified then (stop reason "time")."""
        started = time.perf_counter()
        stop_at = request.stop_at()
        self._share_cores()
        cursor = plan_of(request)  # the one the request carries (the server's), else made here
        if cursor.refused is not None:
            return Completion(text="", reason=cursor.refused)
        situation, multiline = cursor.situation, cursor.multiline
        budget = self.latency_budget(request)
        prompt = self.prepare(request, budget=budget)
        tokenizer = self.loaded.tokenizer
        # At a line start the cursor is read without the code below it (`above`), or that
        # first and then with it where time allows (`choose`): pipeline/readings.py.
        around: Prompt | None = None  # the reading with the code below, when it comes second
        reading = request.line_start_reading
        if reading != "around" and readings.applies(situation, prompt, self.loaded.fim is not None):
            without = readings.without_code_below(prompt, self.loaded.fim, self.repo_name(request))
            around, prompt = (prompt if reading == "choose" else None), without
        prompt_ids = tokenizer.encode(prompt.text, add_special_tokens=True)
        healed = prompt.healed

        def generated_text(tokens) -> str:
            return tokenizer.decode(list(tokens))[len(healed) :]

        progress = None
        shown: list[str] = []  # what on_partial was handed last
        if on_partial is not None and deadline is not None:
            progress = self._partial_reporter(
                deadline, on_partial, generated_text, situation, multiline, len(prompt_ids), shown
            )
        rules = StopRules(
            max_new_tokens=request.max_new_tokens,
            stop_token_ids=self.loaded.stop_token_ids,
            should_stop=lambda tokens: postprocess.should_stop(
                generated_text(tokens), situation, multiline
            ),
            cancelled=cancelled,
            prefill_chunk=budget.prefill_chunk,
            progress=progress,
            stop_at=stop_at,
            score=around is not None,
        )
        constraint = HealingConstraint(healed, self.vocabulary, tokenizer) if healed else None
        plan = self.plan(request, len(prompt_ids))
        decode = GreedyDecoder() if request.plain else self._decoder_for(request, plan)
        self._draft_from_open_buffers(decode, request)
        branches = None  # the alternatives, decoded after the greedy tokens (inference/branches.py)
        if request.alternatives > 1:
            first_due = deadline if on_partial is not None else None

            def branch_until(greedy: Sequence[int]) -> float:
                if not postprocess.finish(generated_text(greedy), situation, multiline):
                    return -math.inf  # no first item: no others are shown
                # With a first-response deadline the answer's time counts: a tenth of it at
                # most. Without one (firstResponseMs 0) the whole answer was asked for.
                spent_s = math.inf if first_due is None else time.perf_counter() - started
                return alternatives_until(stop_at, first_due, answered=bool(shown), spent_s=spent_s)

            branches = BranchRules(
                count=request.alternatives - 1, max_tokens=ALTERNATIVE_TOKENS, until=branch_until
            )

        def decoded(
            allowed: AllowedTokens | None,
            branch_rules: BranchRules | None,
            decode_rules: StopRules = rules,
        ) -> tuple[Generation, str, str]:
            """The generation, its raw text and the text to show, of the prompt read now."""
            # Per-buffer decoders keep the KV cache and last suggestion of each buffer.
            generation = decode(
                self.loaded.model,
                prompt_ids,
                decode_rules,
                allowed_tokens=allowed,
                buffer_id=request.buffer_id,
                branches=branch_rules,
            )
            raw = generated_text(generation.tokens)
            return generation, raw, postprocess.finish(raw, situation, multiline)

        generation, raw, text = decoded(constraint, branches)
        self._observe_prefill(generation)
        beaten: Generation | None = None  # the first reading, when the second answers
        due = None  # the first response's deadline, which the second reading may not pass
        if on_partial is not None and deadline is not None:
            due = deadline() if callable(deadline) else deadline
        around_ids = tokenizer.encode(around.text, add_special_tokens=True) if around else []
        if (
            around is not None
            and generation.stop_reason in readings.ENDED
            and not shown
            and not (cancelled is not None and cancelled())
            and readings.fits_before(
                due, generation, len(around_ids) - len(prompt_ids), self.prefill_rate.settled
            )
        ):
            above = (generation, raw, text, prompt, prompt_ids)
            # decoded() reads prompt_ids when called: here, and in the second tries below, it
            # decodes the reading chosen last.
            prompt, prompt_ids = around, around_ids
            around_reading = decoded(
                constraint,
                None,
                replace(
                    rules, progress=None, stop_at=stop_at if due is None else min(stop_at, due)
                ),
            )
            scores = {
                "above": readings.first_line_score(generation, self.vocabulary.pieces),
                "around": readings.first_line_score(around_reading[0], self.vocabulary.pieces),
            }
            if around_reading[0].stop_reason in readings.ENDED and readings.second_wins(
                (text, scores["above"]), (around_reading[2], scores["around"])
            ):
                beaten = generation
                generation, raw, text = around_reading
                generation.stats["reading"] = "around"
            else:
                generation, raw, text, prompt, prompt_ids = above
            generation.stats["readingScores"] = {k: round(v, 4) for k, v in scores.items()}
        skipped = second_try.next_line(
            generation,
            raw,
            text,
            situation,
            constraint,
            generated_text,
            lambda: self.vocabulary.pieces,
        )
        if skipped is not None:
            # The model wrote the line below instead of this one: its best other beginning of
            # the line, decoded once more (the prompt is in the buffer's cache by now).
            generation, raw, text = decoded(skipped, None)
            generation.stats["otherLineStart"] = True
        else:
            unmatched = second_try.closer(
                generation,
                raw,
                situation,
                multiline,
                constraint,
                lambda tokens: tokenizer.decode(list(tokens)),
                healed,
                lambda: self.vocabulary.pieces,
            )
            if unmatched is not None:
                # The line was cut before a bracket that closes nothing: decoded once more
                # without that bracket there, kept when it ends by itself and adds to the line
                # (the model may stray earlier); the first's alternatives stay.
                def shown_of(tokens: Sequence[int]) -> str:
                    return postprocess.partial(generated_text(tokens), situation, multiline)

                again_rules = replace(
                    rules, progress=second_try.progress_beyond(text, rules.progress, shown_of)
                )
                again, again_raw, again_text = decoded(unmatched, None, again_rules)
                if second_try.finished(again) and second_try.adds_to(text, again_text):
                    again.alternatives = again.alternatives or generation.alternatives
                    again.stats["otherCloser"] = text  # the cut line it adds to
                    generation, raw, text = again, again_raw, again_text
        through = None  # the line through the code after the cursor, when it is that
        if generation.stop_reason == "cancelled":
            text = ""
        elif generation.stop_reason == "time":  # cut short: up to its last whole line or word
            text = postprocess.partial(raw, situation, multiline)
        else:
            through = postprocess.through_rest(raw, situation, multiline)
        others = [
            (postprocess.finish if branch.ended else postprocess.partial)(
                generated_text(branch.tokens), situation, multiline
            )
            for branch in (generation if beaten is None else beaten).alternatives
        ]
        if beaten is not None:  # the line the model was less sure of is the first other item
            others.insert(
                0, postprocess.finish(generated_text(beaten.tokens), situation, multiline)
            )
        self.calibration.answered()  # the first answer is out: timings may follow, when idle
        return Completion(
            text=through or text,
            replaces_rest=through is not None,
            reason=None if through or text else self._empty_reason(generation),
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
            alternatives=alternatives.distinct(text, others, request.alternatives),
        )

    def _partial_reporter(
        self,
        deadline: Deadline,
        on_partial: PartialListener,
        generated_text: Callable[[Sequence[int]], str],
        situation: CursorSituation,
        multiline: bool,
        prompt_tokens: int,
        shown: list[str],
    ) -> Callable[[Sequence[int]], None]:
        """The decoder's progress callback of a request with a deadline: from the deadline on,
        hands on what is verified whenever it changes, once there is some: an empty answer at
        the deadline would leave the editor blank until the next keystroke, so a request with
        nothing verified by then waits for its first text (or the end of decoding). `shown`
        holds what was handed on last."""
        due = deadline if callable(deadline) else lambda: deadline

        def report(tokens: Sequence[int]) -> None:
            if time.monotonic() < due():
                return
            raw = generated_text(tokens)
            text = postprocess.partial(raw, situation, multiline)
            if not text or (shown and text == shown[0]):
                return
            shown[:] = [text]
            on_partial(
                Completion(
                    text=text,
                    multiline=multiline,
                    new_tokens=len(tokens),
                    prompt_tokens=prompt_tokens,
                    stop_reason="partial",
                    model=self.loaded.name,
                    raw=raw,
                )
            )

        return report

    def prewarm(
        self,
        request: CompletionRequest,
        *,
        cancelled: Callable[[], bool] | None = None,
        pin: bool = True,
    ) -> dict[str, Any]:
        """Prefill the prompt a completion at this cursor starts from into the buffer's kept KV
        cache, decoding nothing: the buffer's next completion prefills only what changed since.
        Lowest-priority work: `cancelled` stops it between prefill chunks and what was done stays.
        Memory is the prefix cache's, under its bounds. Returns what it did. `pin` False (a
        guessed cursor): the prompt's head is not pinned for the buffer, so its first request
        packs for its own cursor, and reuses this prefill as far as the two prompts agree."""
        done: dict[str, Any] = {"promptTokens": 0, "prefilledTokens": 0, "cancelled": False}
        if request.buffer_id is None or request.plain:
            return done
        self._share_cores()
        budget = self.latency_budget(request)
        prompt = self.prepare(request, budget=budget, stable=pin)
        prompt_ids = self.loaded.tokenizer.encode(prompt.text, add_special_tokens=True)
        plan = self.plan(request, len(prompt_ids))
        if self._decoder_for(request, plan) is not self.decoder:
            return done  # a compressed decoder prefills its own way
        rules = StopRules(
            max_new_tokens=0,
            cancelled=cancelled,
            # In chunks always: a request arriving meanwhile cancels it between two.
            prefill_chunk=budget.prefill_chunk or MIN_CHUNK_TOKENS,
            stop_at=request.stop_at(),
        )
        generation = self.decoder.prefill_only(
            self.loaded.model, prompt_ids, rules, buffer_id=request.buffer_id
        )
        self._observe_prefill(generation)
        return generation.prefill_report()

    def _observe_prefill(self, generation: Generation) -> None:
        """A finished prefill is a sample of the rate, once the rate is being measured (a timing
        engine's first prefill is its first sample)."""
        if generation.forward_passes < 1:
            return
        self.prefilled = True
        measuring = self.time_passes or self.prefill_rate.settled is not None
        if not measuring:
            return
        prefilled = generation.prompt_tokens - generation.stats.get("reusedPromptTokens", 0)
        self.prefill_rate.observe(prefilled, generation.prefill_ms)

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
        if not decoder.drafts_from_workspace:
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
        decoder.set_workspace_tokens(list(self._buffer_ids.values()))

    def session_ended(self) -> None:
        """The pinned prompt heads go (they hold the ended session's workspace snippets, and
        their key names its index by identity); the KV caches stay: a prompt reuses them only
        as far as its tokens match."""
        self.stable.clear()

    def forget(self, buffer_id: str) -> None:
        """Drop a closed buffer's KV cache, last suggestion and pinned prompt head."""
        self.stable.forget(buffer_id)
        for decoder in [self.decoder, *(d for _, d in self._compressed.values())]:
            decoder.forget(buffer_id)

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
        if generation.stop_reason == "time":
            return "nothing verified within completion.maxWaitMs"
        return "the model suggested nothing useful here (empty after trimming)"


def alternatives_until(
    stop_at: float, deadline: Deadline | None, *, answered: bool, spent_s: float = math.inf
) -> float:
    """The time.monotonic() by which alternatives are decoded, once the greedy decode has ended
    `spent_s` after the request started: never for a request already answered early (its
    response is out: they could not be in it), else at most ALTERNATIVES_MS and
    ALTERNATIVES_SHARE of `spent_s`, and no later than its first-response deadline (the first
    item is never held past it for them) nor its stop time."""
    if answered:
        return -math.inf
    room_s = min(ALTERNATIVES_MS / 1000, ALTERNATIVES_SHARE * spent_s)
    until = min(time.monotonic() + room_s, stop_at)
    if deadline is not None:
        until = min(until, deadline() if callable(deadline) else deadline)
    return until


def _kv_decision(plan: compression_policy.Plan) -> dict[str, Any]:
    """The KV part of a plan, for Completion.stats (chunk scoring shows in the prompt's stats)."""
    reasons = [r for r in plan.reasons if r.startswith("kv:")]
    return {"kvMode": plan.kv_mode, "reason": reasons[0] if reasons else None}
