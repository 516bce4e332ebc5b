"""Next edits from the model in this process: the window rewritten with plain greedy's tokens,
decoded speculatively with the window's current text as the main draft (inference/edit_draft.py),
and ended early once it re-converges after a change (`Reconverged`) or has copied the old text
some lines past the cursor and the last edit (`CopyBound`). The window, the prompt and
the proposals are next_edit/predict.py's, the same for a serving engine.

Each buffer's keys and values are kept between its requests (the decoder's prefix cache, at most
MAX_BUFFERS buffers): a request prefills only what its prompt does not share with the buffer's
last one. `prewarm` fills that cache during the user's pause with the prompt the next request is
expected to have (prefill only, in chunks, stopped between two when `cancelled`), so the request
prefills only what differs. The tokens are the same either way: a prefix's keys and values do not
depend on what follows it."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Any

from memosight_lsp.inference.decoder import Decoder, Generation, StopRules
from memosight_lsp.inference.drafters import CostModel, PromptLookup
from memosight_lsp.inference.edit_draft import CopyBound, Reconverged, WindowDraft, line_end_token
from memosight_lsp.inference.fused_trunk import EXACT_ROWS
from memosight_lsp.inference.greedy import GreedyDecoder
from memosight_lsp.inference.loading import LoadedModel
from memosight_lsp.inference.prefix_cache import PrefixCache
from memosight_lsp.inference.speculative import SpeculativeDecoder

from .predict import (
    NextEdit,
    NextEditRequest,
    Window,
    copy_bound_line,
    finish,
    rewrite_budget,
    window_of,
    window_proposals,
)
from .prompt import NextEditPrompt, tokenizer_traits

STOP_TAIL_TOKENS = 12  # the end marker is looked for in the last tokens' text
# Draft tokens per pass: a copy is long and likely. With the last committed token a pass has
# one row more, and in half precision without the native kernels only passes of up to
# EXACT_ROWS rows attend row by row as one-token steps do (fused_trunk.py): a longer one could
# round differently from plain greedy.
MAX_DRAFT = EXACT_ROWS - 1
HEAD_KEY = "#nextEditHead"  # the prefix cache's entry the prompts' common head is prefilled in
# Buffers whose caches are kept, the most recently used (the head's cache is kept apart).
MAX_BUFFERS = 4
# Prompt tokens per pre-warm prefill pass: a request arriving meanwhile waits for one at most
# (pipeline/latency.py's MIN_CHUNK_TOKENS: smaller passes cost more than they save).
PREWARM_CHUNK = 64


class NextEditor:
    """Predicts next edits with one loaded model. Not thread-safe: one worker calls it."""

    def __init__(self, loaded: LoadedModel, cost_model: CostModel | None = None) -> None:
        self.loaded = loaded
        # The prompts' common head (NextEditPrompt.head): its text, its ids and their cache.
        self._head: tuple[str, list[int], Any] | None = None
        # Per buffer, the prompt positions [start, end) its last pre-warm prefilled (what its
        # next request reuses of them is that request's `prewarmedTokens`).
        self._prewarmed: dict[str, tuple[int, int]] = {}
        self.window_draft = WindowDraft()
        self.decoder = SpeculativeDecoder(
            prefix_cache=PrefixCache(max_buffers=MAX_BUFFERS),
            sources=[self.window_draft, PromptLookup()],
            cost_model=cost_model or CostModel(),
            max_draft=MAX_DRAFT,
            max_depth=MAX_DRAFT,
            calibrate=False,
        )

    def forget(self, buffer_id: str) -> None:
        self.decoder.forget(buffer_id)
        self._prewarmed.pop(buffer_id, None)

    def prompt(self, request: NextEditRequest) -> tuple[NextEditPrompt, Window]:
        """The prompt and the window it rewrites."""
        window = window_of(request)
        traits = tokenizer_traits(self.loaded.tokenizer, self.loaded.name)
        return window.prompt(traits, request), window

    def predict(
        self, request: NextEditRequest, *, cancelled: Callable[[], bool] | None = None
    ) -> NextEdit:
        started = time.perf_counter()
        tokenizer = self.loaded.tokenizer
        prompt, window = self.prompt(request)
        prompt_ids = tokenizer.encode(prompt.text, add_special_tokens=True)
        draft_ids = tokenizer.encode(prompt.draft_text(window.text), add_special_tokens=False)
        if not request.plain:
            self.start_from_head(request.buffer_id, prompt, prompt_ids)
        prewarmed = self._prewarmed.pop(request.buffer_id or "", None)
        generation, rest = self.rewrite(request, prompt, window, prompt_ids, draft_ids, cancelled)
        reused = generation.stats.get("reusedPromptTokens", 0)
        if prewarmed is not None:  # what the pause's pre-warm prefilled, of what was reused
            start, end = prewarmed
            generation.stats["prewarmedTokens"] = max(0, min(reused, end) - start)
        rewrite, complete = prompt.answer_of(tokenizer.decode([*generation.tokens, *rest]))
        result = NextEdit(
            hunks=[],
            rewrite=rewrite,
            complete=complete,
            family=prompt.family,
            model=self.loaded.name,
            prompt_tokens=len(prompt_ids),
            new_tokens=len(generation.tokens),
            draft_tokens=len(draft_ids),
            forward_passes=generation.forward_passes,
            prefill_ms=generation.prefill_ms,
            decode_ms=generation.decode_ms,
            stop_reason=generation.stop_reason,
            tokens=list(generation.tokens),
            unwritten_tokens=len(rest),
            stats=dict(generation.stats),
        )
        if generation.stop_reason == "cancelled":
            result.first_line, result.end_line = window.first, window.end
            result.window_start, result.window_end = window.start, window.stop
            result.reason = "the request was superseded or cancelled"
        else:
            finish(result, request, window)
        result.total_ms = (time.perf_counter() - started) * 1000
        return result

    def prewarm(
        self, request: NextEditRequest, *, cancelled: Callable[[], bool] | None = None
    ) -> dict[str, Any]:
        """Prefill the prompt of `request` into its buffer's kept cache and decode nothing: the
        buffer's next request, when its prompt starts the same, prefills only the rest. In
        PREWARM_CHUNK chunks, `cancelled` polled between two (what is done stays in the cache),
        and within request.max_wait_ms. Nothing with request.plain or no buffer_id, or for a
        model the speculative decoder does not keep caches for. Returns what it did."""
        done: dict[str, Any] = {"promptTokens": 0, "prefilledTokens": 0, "cancelled": False}
        buffer_id = request.buffer_id
        model = self.loaded.model
        if request.plain or buffer_id is None or not self.decoder.reuses_cache_of(model):
            return done
        prompt, _ = self.prompt(request)
        prompt_ids = self.loaded.tokenizer.encode(prompt.text, add_special_tokens=True)
        self.start_from_head(buffer_id, prompt, prompt_ids)
        rules = StopRules(
            max_new_tokens=0,
            cancelled=cancelled,
            prefill_chunk=PREWARM_CHUNK,
            stop_at=time.monotonic() + request.max_wait_ms / 1000,
        )
        generation = self.decoder.prefill_only(model, prompt_ids, rules, buffer_id=buffer_id)
        report = generation.prefill_report()
        reused = report["reusedPromptTokens"]
        in_cache = reused + report["prefilledTokens"]
        self._prewarmed.pop(buffer_id, None)
        if in_cache > reused:
            self._prewarmed[buffer_id] = (reused, in_cache)
            while len(self._prewarmed) > MAX_BUFFERS:
                del self._prewarmed[next(iter(self._prewarmed))]
        return report

    def prepare_head(
        self, request: NextEditRequest, *, cancelled: Callable[[], bool] | None = None
    ) -> int:
        """Prefill the prompts' common head of `request`'s prompt family now, before any request
        needs it (the server does this when its worker first idles with the model loaded), so
        that no request pays for it. The head's tokens in the cache; 0: none (a family with no
        common head, a model the decoder keeps no caches for, or `cancelled` meanwhile)."""
        prompt, _ = self.prompt(request)
        head = self._head_of(prompt, cancelled)
        return 0 if head is None else len(head[1])

    def _head_of(
        self, prompt: NextEditPrompt, cancelled: Callable[[], bool] | None = None
    ) -> tuple[str, list[int], Any] | None:
        """The prompts' common head (text, ids, cache), prefilled on first use; None when the
        prompt has none or it cannot be kept."""
        if prompt.head <= 0:
            return None
        text = prompt.text[: prompt.head]
        model = self.loaded.model
        if self._head is None or self._head[0] != text:
            self._head = None
            ids = self.loaded.tokenizer.encode(text, add_special_tokens=True)
            if not self.decoder.reuses_cache_of(model) or len(ids) < 2:
                return None
            rules = StopRules(max_new_tokens=1, cancelled=cancelled, prefill_chunk=PREWARM_CHUNK)
            self.decoder.prefill_only(model, ids, rules, buffer_id=HEAD_KEY)
            cache, reused = self.decoder.prefix_cache.take(HEAD_KEY, model, [*ids, -1])
            if reused != len(ids):
                return None
            self._head = (text, ids, cache)
        return self._head

    def start_from_head(
        self, buffer_id: str | None, prompt: NextEditPrompt, prompt_ids: Sequence[int]
    ) -> None:
        """A buffer the decoder keeps no cache for starts from a copy of the cache of the
        prompts' common head (the instructions, prefilled once), so its prefill is the rest.
        A buffer with a cache reuses its own (its last prompt's common prefix: the head and
        more)."""
        cache_of = self.decoder.prefix_cache
        if buffer_id is None or buffer_id in cache_of:
            return
        head = self._head_of(prompt)
        if head is None:
            return
        _, ids, cache = head
        if list(prompt_ids[: len(ids)]) == ids:
            cache_of.put(buffer_id, self.loaded.model, ids, copy.deepcopy(cache))

    def rewrite(
        self,
        request: NextEditRequest,
        prompt: NextEditPrompt,
        window: Window,
        prompt_ids: Sequence[int],
        draft_ids: Sequence[int],
        cancelled: Callable[[], bool] | None = None,
    ) -> tuple[Generation, list[int]]:
        """The model's rewrite of the window: greedy tokens, drafted from the window unless
        request.plain, and the old tokens taken as written after them: none, unless it ended
        early (request.early_stop): re-converged after a change (stop reason "converged"), or
        copying past the lines it waits for (request.copy_lines; stop reason "bounded")."""
        tokenizer = self.loaded.tokenizer
        end = prompt.end
        converged: Reconverged | None = None
        bounded: CopyBound | None = None
        if request.early_stop:
            newlines = [
                text.count("\n") for text in tokenizer.batch_decode([[t] for t in draft_ids])
            ]
            converged = Reconverged(draft_ids, [n > 0 for n in newlines])
            line = copy_bound_line(request, window)
            bound = None if line is None else line_end_token(newlines, line)
            if bound is not None:
                bounded = CopyBound(draft_ids, [n > 0 for n in newlines], bound)
        early: Reconverged | CopyBound | None = None

        def ended(tokens: Sequence[int]) -> bool:
            nonlocal early
            if end in tokenizer.decode(list(tokens[-STOP_TAIL_TOKENS:])):
                return True
            if converged is not None and converged(tokens):
                # Back on the old text after a change: stop when the rewrite, with the rest
                # taken as the old text, has a change to propose; a change that would be
                # dropped (an undo, whitespace, unrelated) lets it go on to the next.
                text = tokenizer.decode([*tokens, *converged.rest()])
                rewrite, complete = prompt.answer_of(text)
                if window_proposals(request, window, rewrite, complete)[0]:
                    early = converged
                    return True
            if bounded is not None and bounded(tokens):
                early = bounded  # copying, past the lines waited for: the rest as it is
                return True
            return False

        rules = StopRules(
            max_new_tokens=rewrite_budget(len(draft_ids)),
            stop_token_ids=self.loaded.stop_token_ids,
            should_stop=ended,
            cancelled=cancelled,
            stop_at=time.monotonic() + request.max_wait_ms / 1000,
        )
        decoder: Decoder
        if request.plain:
            decoder = GreedyDecoder()
        else:
            # The draft ends where the copy bound would stop a copy: rows past it are waste.
            self.window_draft.set_target(draft_ids, bounded.copy_left if bounded else None)
            decoder = self.decoder
        generation = decoder(self.loaded.model, prompt_ids, rules, buffer_id=request.buffer_id)
        if early is not None and generation.stop_reason == "stop":
            generation.stop_reason = "converged" if early is converged else "bounded"
            return generation, early.rest()
        return generation, []
