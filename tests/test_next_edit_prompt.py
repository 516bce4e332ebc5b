"""The next-edit prompt of each family as text, and its answer read back: Zeta's excerpt with the
editable region and the cursor, Sweep's original / current / updated files, ChatML for a
serving engine, and which family a model gets (by setting, name and vocabulary)."""

from __future__ import annotations

from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import proposals
from memosight_lsp.next_edit.prompt import (
    CHAT_END,
    PLAIN_END,
    SWEEP_SEP,
    ZETA_CURSOR,
    ZETA_INSTRUCTION,
    ZETA_REGION_END,
    ZETA_REGION_START,
    ModelTraits,
    build_next_edit_prompt,
    choose_family,
    original_window,
)

BEFORE = "def total(xs):\n    acc = 0\n    for x in xs:\n        acc += x\n    return acc\n"
AFTER = BEFORE.replace("    acc = 0", "    sum_ = 0")
NEXT = AFTER.replace("        acc += x", "        sum_ += x")


def edited(old: str, new: str):
    history = EditHistory()
    history.opened("u", old)
    history.changed("u", new)
    return history.recent("u")


EDITS = edited(BEFORE, AFTER)
CURSOR = AFTER.index("sum_ = 0") + len("sum_")


def prompt(family: str, **kw):
    args = {"window": AFTER, "edits": EDITS, "path": "calc.py", "language": "python"}
    return build_next_edit_prompt(ModelTraits(), setting=family, **{**args, **kw})


def test_zeta_prompt_is_its_instruction_edits_and_excerpt_with_the_region_and_cursor():
    zeta = prompt("zeta", cursor=CURSOR, first_line=0)
    head = f"```calc.py\n<|start_of_file|>\n{ZETA_REGION_START}\n"
    window = AFTER[:CURSOR] + ZETA_CURSOR + AFTER[CURSOR:]
    assert zeta.text == (
        f"### Instruction:\n{ZETA_INSTRUCTION}\n\n"
        "### User Edits:\n\n"
        'User edited "calc.py":\n```diff\n@@ -2,1 +2,1 @@\n-    acc = 0\n+    sum_ = 0\n```\n\n'
        f"### User Excerpt:\n\n{head}{window}{ZETA_REGION_END}\n```\n\n"
        f"### Response:\n{head}"
    )
    assert zeta.family == "zeta" and zeta.end == ZETA_REGION_END
    assert zeta.stops == (ZETA_REGION_END,)
    # Not at the start of the file: no start-of-file marker.
    assert "<|start_of_file|>" not in prompt("zeta", cursor=None, first_line=12).text


def test_zeta_answer_read_back_without_the_cursor_and_cut_short():
    zeta = prompt("zeta", cursor=CURSOR)
    answer = NEXT[:CURSOR] + ZETA_CURSOR + NEXT[CURSOR:] + ZETA_REGION_END + "\n```"
    assert zeta.answer_of(answer) == (NEXT, True)
    assert zeta.draft_text(AFTER) == AFTER + ZETA_REGION_END
    # Cut short by the deadline inside the changed line: not closed, and nothing whole to
    # propose; cut after it: that line's change alone, the lines not reached kept.
    inside = NEXT[: NEXT.index("sum_ += x") + 4]
    assert zeta.answer_of(inside) == (inside, False)
    assert proposals(AFTER, inside, False, EDITS[-1]) == ([], "the rewrite was cut short unchanged")
    after_it = NEXT[: NEXT.index("    return")]
    hunks, reason = proposals(AFTER, zeta.answer_of(after_it)[0], False, EDITS[-1])
    assert reason is None
    assert [(AFTER[h.start : h.end], h.new_text) for h in hunks] == [("acc", "sum_")]


def test_sweep_prompt_is_the_diff_then_original_current_and_updated_files():
    sweep = prompt("sweep")
    assert sweep.text == (
        f"{SWEEP_SEP}calc.py.diff\noriginal:\n    acc = 0\nupdated:\n    sum_ = 0\n"
        f"{SWEEP_SEP}original/calc.py\n{BEFORE}"
        f"{SWEEP_SEP}current/calc.py\n{AFTER}"
        f"{SWEEP_SEP}updated/calc.py\n"
    )
    assert sweep.family == "sweep" and sweep.end == SWEEP_SEP
    assert sweep.answer_of(NEXT + SWEEP_SEP + "other/file.py\n") == (NEXT, True)
    assert sweep.answer_of(NEXT[:20]) == (NEXT[:20], False)
    assert "<|endoftext|>" in sweep.stops


def test_the_original_window_turns_the_last_edit_back_only_where_the_window_holds_it():
    assert original_window(AFTER, EDITS, 0) == BEFORE
    # The window starts below the edit: it is not in the window, the window is the original.
    assert (
        original_window(AFTER[AFTER.index("    for") :], EDITS, 2)
        == AFTER[AFTER.index("    for") :]
    )
    assert original_window(AFTER, (), 0) == AFTER
    moved = "# a line\n" + AFTER  # the edit's line no longer holds its text: left as it is
    assert original_window(moved, EDITS, 0) == moved


def test_chat_over_an_engine_is_chatml_text_and_plain_without_chatml():
    qwen = ModelTraits(name="qwen2.5-coder-0.5b-instruct-q8_0.gguf")
    chat = build_next_edit_prompt(
        qwen, window=AFTER, edits=EDITS, path="calc.py", language="python"
    )
    assert chat.family == "chat" and chat.end == CHAT_END
    assert chat.text.startswith("<|im_start|>system\n")
    assert chat.text.endswith("<|im_end|>\n<|im_start|>assistant\n```python\n")
    assert chat.answer_of(NEXT + "```\n<|im_end|>") == (NEXT, True)
    other = ModelTraits(name="codellama-7b.Q4_K_M.gguf")
    plain = build_next_edit_prompt(
        other, window=AFTER, edits=EDITS, path="calc.py", language="python", setting="chat"
    )
    assert plain.family == "plain" and plain.end == PLAIN_END  # no template to apply: plain


def test_the_family_by_setting_name_and_vocabulary():
    def vocab(*tokens: str) -> ModelTraits:
        return ModelTraits(name="model.gguf", has_token=lambda t: t in tokens)

    assert choose_family(ModelTraits(name="zeta.Q8_0.gguf")) == "zeta"
    assert choose_family(vocab(ZETA_REGION_START, ZETA_REGION_END)) == "zeta"
    assert choose_family(ModelTraits(name="sweep-next-edit-1.5b.gguf")) == "sweep"
    assert choose_family(ModelTraits(name="Qwen2.5-Coder-0.5B")) == "chat"
    assert choose_family(vocab("<|im_start|>", "<|im_end|>")) == "chat"
    assert choose_family(ModelTraits(template=lambda messages: "x")) == "chat"
    assert choose_family(vocab("<fim_prefix>")) == "plain"
    # The setting wins over the name; "chat" needs a template or ChatML.
    assert choose_family(ModelTraits(name="zeta"), "plain") == "plain"
    assert choose_family(ModelTraits(name="Qwen2.5-Coder"), "sweep") == "sweep"
    assert choose_family(ModelTraits(name="zeta"), "chat") == "plain"
    assert choose_family(ModelTraits(name="qwen-zeta"), "chat") == "chat"
