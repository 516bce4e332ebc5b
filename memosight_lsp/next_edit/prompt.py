"""The next-edit prompt of each model family, in one place.

The model sees the buffer's recent edits and a window of the buffer, and writes the window again
with the edit it expects next, then an end marker. Four formats:

- chat: instruction-tuned models (a chat template in the tokenizer, or ChatML tokens in the
  vocabulary: Qwen2.5-Coder-Instruct and kin). The instruction is the system turn, the same in
  every request (`NextEditPrompt.head`); the edits as a unified diff, the window and a one-line
  request are the user turn; the answer is started with the code fence, so the model's first
  tokens are the window's, and the closing fence ends it.
- plain: base models. The diff, the window before, and the start of the window after, in
  comment-like headers; the end marker follows the window before, so a model that copies ends
  where the window ends.
- zeta: Zed's Zeta (zed-industries/zeta, the zeta1 format of crates/zeta): `### Instruction:`,
  each edit as `User edited "path":` and a diff block under `### User Edits:`, the window as the
  editable region of `### User Excerpt:` (a fence named by the path, `<|start_of_file|>` when
  the window starts the file, `<|editable_region_start|>` / `<|editable_region_end|>` around it,
  `<|user_cursor_is_here|>` at the cursor), then `### Response:`. The answer is started with the
  excerpt's head up to the region's start; the region's end marker ends it.
- sweep: Sweep's next-edit models (sweepai/sweep-next-edit, Qwen2.5-Coder's file separators):
  each edit as `<|file_sep|>path.diff` with `original:` / `updated:` lines, then the window
  before the last edit (`<|file_sep|>original/path`), the window now (`current/path`) and
  `<|file_sep|>updated/path`, after which the model writes the window; the next file separator
  (or the end of text) ends it.

Which family (`choose_family`): the setting `nextEdit.promptFormat`, or with "auto" the model's
name and vocabulary: "zeta" in the name or the region marker as one token -> zeta; "sweep" in
the name -> sweep; a chat template, ChatML tokens or "qwen" in the name -> chat; else plain. A
serving engine does not hand us its chat template for a raw completion, so there "chat" is the
ChatML text (what Qwen's template writes) when the name or vocabulary says ChatML, and plain
otherwise (`ModelTraits.template` is None for an engine).

Either way the answer the model writes is `rewrite + end`: the window rewritten, then `end`
(NextEditPrompt.answer_of reads the rewrite back, markers the model copies taken out). The
window's own text followed by `end` is the draft of the rewrite (inference/edit_draft.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .edit_history import Edit

PromptFormat = Literal["auto", "chat", "plain", "zeta", "sweep"]
FAMILIES = ("chat", "plain", "zeta", "sweep")

PLAIN_END = "<|end_of_window|>"
CHAT_END = "```"
MAX_DIFF_LINES = 12  # per edit, each side
SYSTEM = "You are a code editor. You predict the next edit a programmer makes."
# In the system turn, before anything that changes: the same tokens start every request, and
# their keys and values are kept once (NextEditPrompt.head).
INSTRUCTION = (
    "Given the programmer's recent edits and the code they are editing, predict the edit they "
    "make next: for example the same change at the next place it is needed. Rewrite the code "
    "with that edit applied and every other line unchanged. If no further edit is needed, "
    "repeat the code unchanged. Answer with the code only, in one code block."
)
REQUEST = "Rewrite the code above with the next edit applied."
CHATML_START, CHATML_END = "<|im_start|>", "<|im_end|>"

# Zeta (zeta1): the words and markers it was trained on.
ZETA_INSTRUCTION = (
    "You are a code completion assistant and your task is to analyze user edits and then "
    "rewrite an excerpt that the user provides, suggesting the appropriate edits within the "
    "excerpt, taking into account the cursor location."
)
ZETA_REGION_START = "<|editable_region_start|>"
ZETA_REGION_END = "<|editable_region_end|>"
ZETA_CURSOR = "<|user_cursor_is_here|>"
ZETA_FILE_START = "<|start_of_file|>"

# Sweep: Qwen2.5-Coder's file separator between the sections; end of text also ends the answer.
SWEEP_SEP = "<|file_sep|>"
SWEEP_EOS = "<|endoftext|>"


@dataclass(frozen=True, kw_only=True)
class NextEditPrompt:
    text: str  # the whole prompt, the start of the answer included
    end: str  # what ends the rewrite in the answer
    family: str  # "chat" | "plain" | "zeta" | "sweep"
    # Markers the model may copy into its rewrite that are not code (zeta's cursor).
    strip: tuple[str, ...] = ()
    # Strings a serving engine stops at (the end first; at most four, the OpenAI API's limit).
    stops: tuple[str, ...] = ()
    # Characters at the start of `text` that are the same in every prompt of this family for
    # the model (the instructions): their keys and values can be kept once and reused.
    head: int = 0

    def draft_text(self, window: str) -> str:
        """What the model writes when it changes nothing: the draft of the rewrite."""
        return window + self.end

    def answer_of(self, generated: str) -> tuple[str, bool]:
        """(the rewrite, whether the end marker closed it) from the text generated so far."""
        for marker in self.strip:
            generated = generated.replace(marker, "")
        at = generated.find(self.end)
        if at == -1:
            return generated, False
        return generated[:at], True


@dataclass(frozen=True, kw_only=True)
class PromptInput:
    """What every format is built from."""

    window: str  # the lines to rewrite, ending with a newline
    edits: Sequence[Edit]  # the buffer's recent edits, oldest first
    path: str = ""
    language: str = ""
    cursor: int | None = None  # the cursor's offset in the window; None: not in it
    first_line: int = 0  # the window's first line in the document


def _no_token(token: str) -> bool:
    return False


@dataclass(frozen=True, kw_only=True)
class ModelTraits:
    """What picks a model's family and writes its chat prompt: its name, whether a marker is one
    token of its vocabulary, and its own chat template (None: it has none, or it is an engine's,
    which a raw completion does not apply)."""

    name: str = ""
    has_token: Callable[[str], bool] = _no_token
    template: Callable[[list[dict[str, str]]], str | None] | None = None

    def chatml(self) -> bool:
        both = self.has_token(CHATML_START) and self.has_token(CHATML_END)
        return both or "qwen" in self.name.lower()


def tokenizer_traits(tokenizer: Any, name: str = "") -> ModelTraits:
    """The traits of a local model from its tokenizer (Hugging Face's interface). A tokenizer
    that looks one token up (inference/fast_tokenizer.py's `token_id`) is asked per token:
    a copy of a 150k-token vocabulary costs every request tens of milliseconds."""
    token_id = getattr(tokenizer, "token_id", None)
    if callable(token_id):

        def has_token(token: str) -> bool:
            return token_id(token) is not None

    else:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}

        def has_token(token: str) -> bool:
            return token in vocab

    template = None
    if getattr(tokenizer, "chat_template", None):

        def template(messages: list[dict[str, str]]) -> str | None:
            try:
                text = tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True
                )
            except Exception:  # a template that wants other roles: ChatML instead
                return None
            return text if isinstance(text, str) else None

    return ModelTraits(name=name, has_token=has_token, template=template)


def choose_family(traits: ModelTraits, setting: str = "auto") -> str:
    """The prompt family for this model under nextEdit.promptFormat (see the module's rules)."""
    if setting in ("plain", "zeta", "sweep"):
        return setting
    name = traits.name.lower()
    if setting == "auto":
        if "zeta" in name or traits.has_token(ZETA_REGION_START):
            return "zeta"
        if "sweep" in name:
            return "sweep"
    return "chat" if traits.template is not None or traits.chatml() else "plain"


def family_of(tokenizer: Any, setting: str = "auto", name: str = "") -> str:
    """The family of a local model from its tokenizer."""
    return choose_family(tokenizer_traits(tokenizer, name), setting)


def compact_diff(edits: Sequence[Edit], path: str) -> str:
    """The edits as one unified diff, oldest first: a hunk per edit with its whole lines."""
    name = path or "buffer"
    out = [f"--- a/{name}", f"+++ b/{name}"]
    for edit in edits:
        out += _hunk(edit)
    return "\n".join(out) + "\n"


def _hunk(edit: Edit) -> list[str]:
    before, after = edit.lines()
    before, after = before[:MAX_DIFF_LINES], after[:MAX_DIFF_LINES]
    out = [f"@@ -{edit.line + 1},{len(before)} +{edit.line + 1},{len(after)} @@"]
    out += [f"-{line}" for line in before]
    out += [f"+{line}" for line in after]
    return out


def build_next_edit_prompt(
    model: Any,
    *,
    window: str,
    edits: Sequence[Edit],
    path: str,
    language: str,
    setting: str = "auto",
    cursor: int | None = None,
    first_line: int = 0,
) -> NextEditPrompt:
    """The prompt in this model's family; `model` is its ModelTraits or a local tokenizer;
    `window` ends with a newline."""
    traits = model if isinstance(model, ModelTraits) else tokenizer_traits(model)
    given = PromptInput(
        window=window,
        edits=edits,
        path=path,
        language=language,
        cursor=cursor,
        first_line=first_line,
    )
    family = choose_family(traits, setting)
    if family == "chat":
        return _chat(traits, given)
    if family == "zeta":
        return _zeta(given)
    if family == "sweep":
        return _sweep(given)
    return _plain(given)


def _plain(given: PromptInput) -> NextEditPrompt:
    diff = compact_diff(given.edits, given.path)
    text = (
        f"# Recent edits to {given.path or 'the buffer'}:\n{diff}"
        f"# The code before the next edit:\n{given.window}{PLAIN_END}\n"
        "# The code after the next edit:\n"
    )
    return NextEditPrompt(text=text, end=PLAIN_END, family="plain", stops=(PLAIN_END,))


def _chat(traits: ModelTraits, given: PromptInput) -> NextEditPrompt:
    diff = compact_diff(given.edits, given.path)
    user = (
        f"My recent edits to {given.path or 'this file'}:\n```diff\n{diff}```\n\n"
        f"The code I am editing:\n```{given.language}\n{given.window}```\n\n{REQUEST}"
    )
    messages = [
        {"role": "system", "content": f"{SYSTEM} {INSTRUCTION}"},
        {"role": "user", "content": user},
    ]
    head = traits.template(messages) if traits.template is not None else None
    if head is None:  # ChatML, as Qwen's template writes it
        head = "".join(f"{CHATML_START}{m['role']}\n{m['content']}{CHATML_END}\n" for m in messages)
        head += f"{CHATML_START}assistant\n"
    return NextEditPrompt(
        text=f"{head}```{given.language}\n",
        end=CHAT_END,
        family="chat",
        stops=(CHAT_END, CHATML_END),
        head=max(0, head.find(user)),  # up to the user's words: the system turn and more
    )


def _zeta(given: PromptInput) -> NextEditPrompt:
    name = given.path or "untitled"
    events = "\n\n".join(
        f'User edited "{name}":\n```diff\n' + "\n".join(_hunk(edit)) + "\n```"
        for edit in given.edits
    )
    window = given.window
    if given.cursor is not None and 0 <= given.cursor <= len(window):
        window = window[: given.cursor] + ZETA_CURSOR + window[given.cursor :]
    # The excerpt's head, up to the region's start: the answer repeats it, so it starts it.
    head = f"```{name}\n" + (f"{ZETA_FILE_START}\n" if given.first_line == 0 else "")
    head += f"{ZETA_REGION_START}\n"
    excerpt = f"{head}{window}{ZETA_REGION_END}\n```"
    text = (
        f"### Instruction:\n{ZETA_INSTRUCTION}\n\n### User Edits:\n\n{events}\n\n"
        f"### User Excerpt:\n\n{excerpt}\n\n### Response:\n{head}"
    )
    return NextEditPrompt(
        text=text,
        end=ZETA_REGION_END,
        family="zeta",
        strip=(ZETA_CURSOR,),
        stops=(ZETA_REGION_END,),
    )


def original_window(window: str, edits: Sequence[Edit], first_line: int) -> str:
    """The window as it was before the last edit: its lines turned back where the window still
    holds them as the edit left them; else the window as it is."""
    if not edits:
        return window
    last = edits[-1]
    lines = window.splitlines()
    before, after = last.before.split("\n"), last.after.split("\n")  # whole lines
    at = last.line - first_line
    if at < 0 or lines[at : at + len(after)] != after:
        return window
    return "\n".join(lines[:at] + before + lines[at + len(after) :]) + "\n"


def _sweep(given: PromptInput) -> NextEditPrompt:
    name = given.path or "untitled"
    parts: list[str] = []
    for edit in given.edits:
        before, after = edit.lines()
        parts += [f"{SWEEP_SEP}{name}.diff", "original:", *before, "updated:", *after]
    original = original_window(given.window, given.edits, given.first_line)
    parts += [f"{SWEEP_SEP}original/{name}", original.removesuffix("\n")]
    parts += [f"{SWEEP_SEP}current/{name}", given.window.removesuffix("\n")]
    parts += [f"{SWEEP_SEP}updated/{name}", ""]
    return NextEditPrompt(
        text="\n".join(parts),
        end=SWEEP_SEP,
        family="sweep",
        stops=(SWEEP_SEP, SWEEP_EOS),
    )
