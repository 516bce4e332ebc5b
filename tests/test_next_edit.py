"""Next-edit prediction: the window, the minimal edits and what is not proposed (real snippets),
the prompt per model family, and the window draft: lossless (the rewrite's tokens are plain
greedy's) and accepting many tokens per pass where the model copies."""

from __future__ import annotations

import dataclasses

import pytest
from test_speculative import FLAT_COST

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.edit_draft import WindowDraft
from memosight_lsp.inference.fused_trunk import EXACT_ROWS
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.local import NextEditor
from memosight_lsp.next_edit.predict import (
    NextEditRequest,
    choose_window,
    line_hunks,
    proposals,
)
from memosight_lsp.next_edit.prompt import (
    CHAT_END,
    PLAIN_END,
    build_next_edit_prompt,
    family_of,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# From textwrap.py (CPython's standard library), a local renamed at its definition.
WINDOW = """def indent(text, prefix, predicate=None):
    prefixed_lines = []
    if predicate is None:
        predicate = str.isspace
    for line in text.splitlines(True):
        if not predicate(line):
            prefixed_lines.append(prefix)
        prefixed_lines.append(line)
    return ''.join(prefixed_lines)
"""
RENAMED_DEF = WINDOW.replace("prefixed_lines = []", "out = []")


def edited(old: str, new: str):
    history = EditHistory()
    history.opened("u", old)
    history.changed("u", new)
    return history.recent("u")


def test_the_next_use_renamed_is_one_minimal_edit():
    rewrite = RENAMED_DEF.replace("prefixed_lines.append(prefix)", "out.append(prefix)")
    hunks, reason = proposals(RENAMED_DEF, rewrite, True, edited(WINDOW, RENAMED_DEF)[-1])
    assert reason is None
    (hunk,) = hunks
    assert RENAMED_DEF[hunk.start : hunk.end] == "prefixed_lines"
    assert hunk.new_text == "out"
    assert hunk.start == RENAMED_DEF.index("prefixed_lines.append(prefix)")


def test_a_change_unrelated_to_the_recent_edits_is_dropped():
    recent = edited(WINDOW, RENAMED_DEF)  # prefixed_lines -> out at the definition
    # The next use renamed, beside a change of the model's own (a default argument): only the
    # rename carries on what the user did.
    rewrite = RENAMED_DEF.replace("prefixed_lines.append(prefix)", "out.append(prefix)")
    rewrite = rewrite.replace("predicate=None", "predicate=str.isspace")
    hunks, reason = proposals(RENAMED_DEF, rewrite, True, recent[-1], recent)
    assert reason is None
    assert [(RENAMED_DEF[h.start : h.end], h.new_text) for h in hunks] == [
        ("prefixed_lines", "out")
    ]
    alone = RENAMED_DEF.replace("predicate=None", "predicate=str.isspace")
    assert proposals(RENAMED_DEF, alone, True, recent[-1], recent) == (
        [],
        "dropped: unrelated to the recent edits",
    )
    # Without the recent edits (a caller that has none) nothing is judged by them.
    assert proposals(RENAMED_DEF, alone, True, recent[-1])[1] is None
    # A call site of the function whose parameter was removed: its name is on the edited line.
    removed = edited(
        "def area(w, h, unit):\n    pass\narea(2, 3, 'cm')\n",
        "def area(w, h):\n    pass\narea(2, 3, 'cm')\n",
    )
    hunks, reason = proposals(
        "def area(w, h):\n    pass\narea(2, 3, 'cm')\n",
        "def area(w, h):\n    pass\narea(2, 3)\n",
        True,
        removed[-1],
        removed,
        frozenset({"def", "pass"}),
    )
    assert reason is None and [h.new_text for h in hunks] == [""]
    # Punctuation: related when it is the text the user typed.
    comma = edited("f(a)\nf(b)\n", "f(a,)\nf(b)\n")
    hunks, reason = proposals("f(a,)\nf(b)\n", "f(a,)\nf(b,)\n", True, comma[-1], comma)
    assert reason is None and [h.new_text for h in hunks] == [","]


def test_an_unchanged_rewrite_proposes_nothing():
    assert proposals(RENAMED_DEF, RENAMED_DEF, True, None) == ([], "no edit predicted")


def test_reindenting_reformatting_large_deletions_and_undo_are_dropped():
    last = edited(WINDOW, RENAMED_DEF)[-1]
    reindented = RENAMED_DEF.replace(
        "        prefixed_lines.append(line)", "      prefixed_lines.append(line)"
    )
    spaced = RENAMED_DEF.replace("str.isspace", "str.isspace ")
    lines = RENAMED_DEF.splitlines(keepends=True)
    deleted = "".join(lines[:3] + lines[8:])
    undone = RENAMED_DEF.replace("out = []", "prefixed_lines = []")
    for rewrite, why in (
        (reindented, "whitespace only"),
        (spaced, "whitespace only"),
        (deleted, "deletes more than 3 lines"),
        (undone, "undoes the last edit"),
    ):
        hunks, reason = proposals(RENAMED_DEF, rewrite, True, last)
        assert hunks == [] and reason is not None and why in reason, (rewrite, reason)


def test_a_rewrite_cut_short_proposes_only_what_it_wrote():
    rewrite = RENAMED_DEF.replace("prefixed_lines.append(prefix)", "out.append(prefix)")
    cut = rewrite[: rewrite.index("        prefixed_lines.append(line)") + 12]
    assert line_hunks(RENAMED_DEF, cut[: cut.index("    if predicate")], False) == []
    hunks, reason = proposals(RENAMED_DEF, cut, False, None)
    assert reason is None
    assert [(RENAMED_DEF[h.start : h.end], h.new_text) for h in hunks] == [
        ("prefixed_lines", "out")
    ]


def test_the_window_starts_above_the_cursor_and_the_last_edit():
    lines = [f"x{i} = {i}\n" for i in range(100)]
    assert choose_window(lines, 50, ()) == (42, 72)
    edits = edited("".join(lines), "".join(lines).replace("x40 = 40", "y40 = 40"))
    assert choose_window(lines, 50, edits) == (32, 62)
    assert choose_window(lines, 2, ()) == (0, 30)
    assert choose_window(lines, 99, ()) == (70, 100)
    assert choose_window(lines[:5], 3, ()) == (0, 5)


def test_prompt_families_chat_and_plain(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    edits = edited(WINDOW, RENAMED_DEF)
    assert family_of(loaded.tokenizer) == "plain"
    plain = build_next_edit_prompt(
        loaded.tokenizer, window=RENAMED_DEF, edits=edits, path="tw.py", language="python"
    )
    assert plain.end == PLAIN_END and plain.text.count(RENAMED_DEF) == 1
    assert "-    prefixed_lines = []\n+    out = []\n" in plain.text
    assert plain.answer_of(RENAMED_DEF + PLAIN_END + "junk") == (RENAMED_DEF, True)

    class ChatML:  # a vocabulary with ChatML tokens and no template: the ChatML fallback
        chat_template = None

        def get_vocab(self):
            return {"<|im_start|>": 1, "<|im_end|>": 2}

    chat = build_next_edit_prompt(
        ChatML(), window=RENAMED_DEF, edits=edits, path="tw.py", language="python"
    )
    assert chat.family == "chat" and chat.end == CHAT_END
    assert chat.text.endswith("<|im_start|>assistant\n```python\n")


def rewrite_both_ways(loaded, request):
    editor = NextEditor(loaded, FLAT_COST)
    plain = editor.predict(NextEditRequest(**{**request.__dict__, "plain": True}))
    drafted = editor.predict(request)
    return plain, drafted


def test_the_window_draft_is_lossless_on_real_architectures(tiny_model_dirs):
    text = RENAMED_DEF + "\n\nprint(indent('a\\nb', '> '))\n"
    request = NextEditRequest(
        text=text,
        cursor_line=1,
        edits=tuple(edited(WINDOW, RENAMED_DEF)),
        path="tw.py",
        language_id="python",
        max_wait_ms=60_000,
    )
    models = dict(tiny_model_dirs)
    if (EMBEDDED_MODEL_DIR / "config.json").is_file():
        models["embedded"] = None
    for name, folder in models.items():
        loaded = load_model(folder, device="cpu")
        plain, drafted = rewrite_both_ways(loaded, request)
        assert drafted.tokens == plain.tokens, name
        assert (drafted.stop_reason, drafted.rewrite) == (plain.stop_reason, plain.rewrite)
        assert drafted.forward_passes <= plain.forward_passes
        assert all(0 <= h.start <= h.end <= len(text) for h in drafted.hunks)


@pytest.mark.skipif(
    not (EMBEDDED_MODEL_DIR / "config.json").is_file(), reason="no embedded default model yet"
)
def test_the_window_draft_follows_a_copy_across_a_change():
    """Where the model writes the old tokens with changes (its greedy output is taken as the
    rewrite, the old window is that output changed), the window source finds its place again
    after each change and most tokens come many a pass. The embedded model: the random tiny
    ones repeat one token, where any place is as good as another."""
    loaded = load_model(None, device="cpu")
    prompt = loaded.tokenizer.encode(WINDOW, add_special_tokens=False)
    rules = StopRules(max_new_tokens=96)
    want = greedy_generate(loaded.model, prompt, rules)
    assert len(set(want.tokens)) > 20  # no repetition of one token
    vocab = int(loaded.model.config.vocab_size)
    old = list(want.tokens)
    old[40] = (old[40] + 1) % vocab  # one token changed
    del old[70:72]  # two tokens the rewrite adds
    decoder = SpeculativeDecoder(
        sources=[WindowDraft(old)], cost_model=FLAT_COST, max_draft=64, max_depth=64
    )
    got = decoder(loaded.model, prompt, rules)
    assert got.tokens == want.tokens
    assert got.stats["acceptedBySource"]["window"] >= len(want.tokens) - 12, got.stats
    assert got.forward_passes <= 16, got.forward_passes  # plain greedy: 96


def test_a_new_buffer_starts_from_the_prompts_common_head_and_stays_lossless(tiny_model_dirs):
    """The chat prompts share their system turn (the instructions): it is prefilled once and a
    buffer's first rewrite starts from a copy of its cache, with plain greedy's tokens; the
    buffer's next request reuses its own cache."""
    text = RENAMED_DEF + "\n\nprint(indent('a\\nb', '> '))\n"
    request = NextEditRequest(
        text=text,
        cursor_line=1,
        edits=tuple(edited(WINDOW, RENAMED_DEF)),
        path="tw.py",
        language_id="python",
        max_wait_ms=60_000,
        prompt_format="chat",
    )
    for name, folder in tiny_model_dirs.items():
        # ChatML by hand (the tiny tokenizers have no template): chosen by the name.
        loaded = dataclasses.replace(load_model(folder, device="cpu"), name="qwen-" + name)
        editor = NextEditor(loaded, FLAT_COST)
        prompt, _ = editor.prompt(request)
        assert prompt.family == "chat" and prompt.text[: prompt.head].endswith("user\n")
        head = len(loaded.tokenizer.encode(prompt.text[: prompt.head], add_special_tokens=True))
        plain = editor.predict(dataclasses.replace(request, plain=True))
        first = editor.predict(dataclasses.replace(request, buffer_id="a"))
        assert first.stats["reusedPromptTokens"] == head > 20, name
        assert first.tokens == plain.tokens and first.hunks == plain.hunks, name
        other = dataclasses.replace(request, buffer_id="b", cursor_line=2)
        assert editor.predict(other).stats["reusedPromptTokens"] == head, name
        again = editor.predict(dataclasses.replace(request, buffer_id="a"))
        assert again.stats["reusedPromptTokens"] == first.prompt_tokens - 1, name
        assert again.tokens == plain.tokens, name


def test_a_rewrite_pass_has_no_more_rows_than_attend_as_one_token_steps(tiny_model_dir):
    """The last committed token and the drafted ones: at most EXACT_ROWS rows, the passes that
    half precision without the native kernels attends row by row, as plain greedy's steps."""
    decoder = NextEditor(load_model(tiny_model_dir, device="cpu"), FLAT_COST).decoder
    assert 1 + decoder.max_draft <= EXACT_ROWS
    assert decoder.max_depth <= decoder.max_draft
