"""The next-edit prompt of each model family, in one place.

The model sees the buffer's recent edits as a compact unified diff and a window of the buffer,
and writes the window again with the edit it expects next, then an end marker. Two formats:

- chat: instruction-tuned models (a chat template in the tokenizer, or ChatML tokens in the
  vocabulary: Qwen2.5-Coder-Instruct and kin). The instruction is the user turn; the answer is
  started with the code fence, so the model's first tokens are the window's, and the closing
  fence ends it.
- plain: base models. The diff, the window before, and the start of the window after, in
  comment-like headers; the end marker follows the window before, so a model that copies ends
  where the window ends.

Either way the answer the model writes is `rewrite + end`: the window rewritten, then `end`
(NextEditPrompt.answer_of reads the rewrite back). The window's own text followed by `end` is
the draft of the rewrite (engine/edit_draft.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .edit_history import Edit

PLAIN_END = "<|end_of_window|>"
CHAT_END = "```"
MAX_DIFF_LINES = 12  # per edit, each side
SYSTEM = "You are a code editor. You predict the next edit a programmer makes."
INSTRUCTION = (
    "Predict the edit the programmer makes next, given their recent edits: for example the same "
    "change at the next place it is needed. Rewrite the code above with that edit applied and "
    "every other line unchanged. If no further edit is needed, repeat the code unchanged. Answer "
    "with the code only, in one code block."
)


@dataclass(frozen=True, kw_only=True)
class NextEditPrompt:
    text: str  # the whole prompt, the start of the answer included
    end: str  # what ends the rewrite in the answer
    family: str  # "chat" | "plain"

    def draft_text(self, window: str) -> str:
        """What the model writes when it changes nothing: the draft of the rewrite."""
        return window + self.end

    def answer_of(self, generated: str) -> tuple[str, bool]:
        """(the rewrite, whether the end marker closed it) from the text generated so far."""
        at = generated.find(self.end)
        if at == -1:
            return generated, False
        return generated[:at], True


def compact_diff(edits: Sequence[Edit], path: str) -> str:
    """The edits as one unified diff, oldest first: a hunk per edit with its whole lines."""
    name = path or "buffer"
    out = [f"--- a/{name}", f"+++ b/{name}"]
    for edit in edits:
        before, after = edit.lines()
        before, after = before[:MAX_DIFF_LINES], after[:MAX_DIFF_LINES]
        out.append(f"@@ -{edit.line + 1},{len(before)} +{edit.line + 1},{len(after)} @@")
        out += [f"-{line}" for line in before]
        out += [f"+{line}" for line in after]
    return "\n".join(out) + "\n"


def family_of(tokenizer: Any) -> str:
    """ "chat" for instruction-tuned models, "plain" for base models."""
    if getattr(tokenizer, "chat_template", None):
        return "chat"
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return "chat" if "<|im_start|>" in vocab and "<|im_end|>" in vocab else "plain"


def build_next_edit_prompt(
    tokenizer: Any, *, window: str, edits: Sequence[Edit], path: str, language: str
) -> NextEditPrompt:
    """The prompt for this model's family; `window` ends with a newline."""
    diff = compact_diff(edits, path)
    if family_of(tokenizer) == "chat":
        return _chat(tokenizer, window, diff, path, language)
    text = (
        f"# Recent edits to {path or 'the buffer'}:\n{diff}"
        f"# The code before the next edit:\n{window}{PLAIN_END}\n"
        "# The code after the next edit:\n"
    )
    return NextEditPrompt(text=text, end=PLAIN_END, family="plain")


def _chat(tokenizer: Any, window: str, diff: str, path: str, language: str) -> NextEditPrompt:
    user = (
        f"My recent edits to {path or 'this file'}:\n```diff\n{diff}```\n\n"
        f"The code I am editing:\n```{language}\n{window}```\n\n{INSTRUCTION}"
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    head = None
    if getattr(tokenizer, "chat_template", None):
        try:
            head = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        except Exception:  # a template that wants other roles: ChatML below
            head = None
    if not isinstance(head, str):
        head = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        head += "<|im_start|>assistant\n"
    return NextEditPrompt(text=f"{head}```{language}\n", end=CHAT_END, family="chat")
