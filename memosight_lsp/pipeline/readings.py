"""How a line start is read: with the code below the cursor, without it, or both.

At the start of a line (nothing but indentation before the cursor, nothing after it on the
line) a fill-in-the-middle prompt tells the model what follows: the lines below. That can help
(the line must lead into them) or mislead: a model whose infilling is weak writes a line that
belongs further on, or bridges to the code below with several lines whose first is not this
one (`completion.lineStartReading`):

- `above`: the same packed prompt with an empty suffix. After a keystroke it prefills nothing
  past the buffer's cached head; on the model measured (Qwen2.5-Coder-0.5B, docs/context.md
  "Reading a line start") it is the better reading, so it is the default;
- `around`: the fill-in-the-middle prompt;
- `choose`: `above` first, then `around` when the first ended by itself, nothing was shown yet,
  and it is likely to end before the first response's deadline (it may not delay the answer
  past it: cut there, it is dropped; without a deadline it always runs). Each is plain greedy
  decoding of its own prompt (speculative decoding gives the same tokens), and the answer is
  the one whose first line the model gave the higher probability: the sum of the
  log-probabilities of its tokens through the first line's end, the token that ends the answer
  included. A reading whose text post-processes to nothing never wins. Ties keep the first.

A line start that begins a block whose body is already below is always read `around`: the
model writes a block there, which must see that body so as not to write it again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from memosight_lsp.inference.decoder import Generation
from memosight_lsp.inference.fim import FimFormat

from .policy import BLOCK_OPENERS, CursorSituation, leading_ws
from .postprocess import width
from .prompt import Prompt, build_prompt

# Generation stop reasons of a decode that ended by itself (not cut by time, cancellation or
# its token cap): only such a reading's line is whole, and only whole lines are compared.
ENDED = ("eos", "stop")


def applies(situation: CursorSituation, prompt: Prompt, has_fim: bool) -> bool:
    """Whether the reading without the code below (`above`, `choose`) can differ from the
    fill-in-the-middle one here: a FIM model, a line start, code below the cursor, and not the
    first line of a block whose body is already below it (there the model writes a block,
    which has to see that body so as not to write it again)."""
    return (
        has_fim
        and not situation.line_prefix.strip()
        and not situation.line_suffix.strip()
        and bool(prompt.context.suffix.strip())
        and not body_below(situation)
    )


def fits_before(
    due: float | None, first: Generation, extra_prompt_tokens: int, rate: float | None
) -> bool:
    """Whether the second reading is likely to end by `due` (time.monotonic(); None: no
    deadline, it always runs): the code below prefilled at the measured `rate` (tokens/s;
    unknown: as fast as the first reading decoded a token), then about as many tokens decoded
    as the first reading took. A reading that would be cut there only delays the answer."""
    if due is None:
        return True
    decode_s = first.decode_ms / 1000
    per_token = decode_s / max(1, len(first.tokens))
    prefill_s = extra_prompt_tokens / rate if rate else extra_prompt_tokens * per_token
    return time.monotonic() + prefill_s + decode_s < due


def body_below(situation: CursorSituation) -> bool:
    """The line above opens a block and the code below the cursor is indented deeper than it:
    the cursor is on a new first line of a body that already has code."""
    above, below = situation.previous_line, situation.next_line
    return (
        above.rstrip().endswith(BLOCK_OPENERS)
        and bool(below.strip())
        and width(leading_ws(below)) > width(leading_ws(above))
    )


def without_code_below(prompt: Prompt, fim: FimFormat | None, repo: str | None) -> Prompt:
    """The same packed context with an empty suffix: the cursor read from the code above."""
    return build_prompt(
        dataclasses.replace(prompt.context, suffix=""),
        fim,
        budget=prompt.budget,
        stable_head=prompt.stable_head,
        repo=repo,
    )


def first_line_score(generation: Generation, pieces: Sequence[str | None]) -> float:
    """The log-probability of a decoded answer's first line: its tokens' through the first one
    that holds a line break (`pieces`: each token's text, healing.VocabularyText), or all of
    them, the stop token's included (generation.scores then has one more than its tokens)."""
    scores = generation.scores
    for k, token in enumerate(generation.tokens):
        if token < len(pieces) and "\n" in (pieces[token] or ""):
            return sum(scores[: k + 1])
    return sum(scores)


def second_wins(first: tuple[str, float], second: tuple[str, float]) -> bool:
    """(shown text, first_line_score) of each reading: whether the second is the answer."""
    (first_text, first_score), (second_text, second_score) = first, second
    if not second_text:
        return False
    return not first_text or second_score > first_score
