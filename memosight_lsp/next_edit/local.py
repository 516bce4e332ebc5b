"""Next edits from the model in this process: the window rewritten with plain greedy's tokens,
decoded speculatively with the window's current text as the main draft (inference/edit_draft.py),
and ended early once it re-converges after a change (`Reconverged`). The window, the prompt and
the proposals are next_edit/predict.py's, the same for a serving engine."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from memosight_lsp.inference.decoder import Decoder, Generation, StopRules
from memosight_lsp.inference.drafters import CostModel, PromptLookup
from memosight_lsp.inference.edit_draft import Reconverged, WindowDraft
from memosight_lsp.inference.greedy import GreedyDecoder
from memosight_lsp.inference.loading import LoadedModel
from memosight_lsp.inference.speculative import SpeculativeDecoder

from .predict import (
    NextEdit,
    NextEditRequest,
    Window,
    finish,
    rewrite_budget,
    window_of,
    window_proposals,
)
from .prompt import NextEditPrompt, tokenizer_traits

STOP_TAIL_TOKENS = 12  # the end marker is looked for in the last tokens' text
MAX_DRAFT = 64  # draft tokens per pass: a copy is long and likely


class NextEditor:
    """Predicts next edits with one loaded model. Not thread-safe: one worker calls it."""

    def __init__(self, loaded: LoadedModel, cost_model: CostModel | None = None) -> None:
        self.loaded = loaded
        self.window_draft = WindowDraft()
        self.decoder = SpeculativeDecoder(
            sources=[self.window_draft, PromptLookup()],
            cost_model=cost_model or CostModel(),
            max_draft=MAX_DRAFT,
            max_depth=MAX_DRAFT,
            calibrate=False,
        )

    def forget(self, buffer_id: str) -> None:
        self.decoder.forget(buffer_id)

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
        generation, rest = self.rewrite(request, prompt, window, prompt_ids, draft_ids, cancelled)
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
        early, re-converged after a change (stop reason "converged"; request.early_stop)."""
        tokenizer = self.loaded.tokenizer
        end = prompt.end
        converged = self.reconverged(draft_ids) if request.early_stop else None
        early = False

        def ended(tokens: Sequence[int]) -> bool:
            nonlocal early
            if end in tokenizer.decode(list(tokens[-STOP_TAIL_TOKENS:])):
                return True
            if converged is None or not converged(tokens):
                return False
            # Back on the old text after a change: stop when the rewrite, with the rest taken as
            # the old text, has a change to propose; a change that would be dropped (an undo,
            # whitespace, unrelated) lets it go on to the next.
            rewrite, complete = prompt.answer_of(tokenizer.decode([*tokens, *converged.rest()]))
            if not window_proposals(request, window, rewrite, complete)[0]:
                return False
            early = True
            return True

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
            self.window_draft.set_target(draft_ids)
            decoder = self.decoder
        generation = decoder(self.loaded.model, prompt_ids, rules, buffer_id=request.buffer_id)
        if early and generation.stop_reason == "stop" and converged is not None:
            generation.stop_reason = "converged"
            return generation, converged.rest()
        return generation, []

    def reconverged(self, draft_ids: Sequence[int]) -> Reconverged:
        """The early stop rule of a rewrite whose draft (the old window) is `draft_ids`."""
        texts = self.loaded.tokenizer.batch_decode([[token] for token in draft_ids])
        return Reconverged(draft_ids, ["\n" in text for text in texts])
