"""The next-edit pre-warm (next_edit/local.py, NextEditor.prewarm): the prompt the request after
the pause is expected to have, prefilled into the buffer's kept cache; the request then
prefills only the rest and rewrites with the same tokens as a cold request, whether the
pre-warm finished, was stopped after a chunk, or guessed the window wrong. The kept caches are
bounded."""

from __future__ import annotations

import dataclasses

import pytest
from test_next_edit import RENAMED_DEF, WINDOW, edited
from test_speculative import FLAT_COST

from memosight_lsp.bench.edits import after_pause, after_request
from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR, load_model
from memosight_lsp.next_edit.local import MAX_BUFFERS, PREWARM_CHUNK, NextEditor
from memosight_lsp.next_edit.predict import NextEditRequest, cursor_after

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXT = RENAMED_DEF + "\n\nprint(indent('a\\nb', '> '))\n"
EDITS = tuple(edited(WINDOW, RENAMED_DEF))
REQUEST = NextEditRequest(
    text=TEXT,
    cursor_line=1,
    cursor=cursor_after(EDITS),
    edits=EDITS,
    path="tw.py",
    language_id="python",
    max_wait_ms=60_000,
    prompt_format="chat",
    buffer_id="a",
)


def chat_models(tiny_model_dirs) -> dict[str, object]:
    """Each tiny architecture, and the embedded model when there is one (it writes real text),
    named so that the chat prompt (ChatML by hand) is chosen."""
    folders: dict[str, object] = dict(tiny_model_dirs)
    if (EMBEDDED_MODEL_DIR / "config.json").is_file():
        folders["embedded"] = None
    return {
        name: dataclasses.replace(load_model(folder, device="cpu"), name="qwen-" + name)
        for name, folder in folders.items()
    }


def test_cursor_after_is_the_end_of_the_last_edits_new_text():
    assert TEXT[: cursor_after(EDITS)].endswith("    out")
    assert cursor_after(()) is None


def test_a_prewarmed_request_rewrites_as_a_cold_one(tiny_model_dirs):
    for name, loaded in chat_models(tiny_model_dirs).items():
        cold = NextEditor(loaded, FLAT_COST).predict(REQUEST)
        assert cold.describe()["prewarmedTokens"] == 0, name
        head = cold.stats["reusedPromptTokens"]  # a first request starts from the head's cache
        editor = NextEditor(loaded, FLAT_COST)
        done = editor.prewarm(REQUEST)
        assert not done["cancelled"], name
        assert done["prefilledTokens"] == cold.prompt_tokens - head > PREWARM_CHUNK, name
        warm = editor.predict(REQUEST)
        assert warm.tokens == cold.tokens, name
        assert (warm.rewrite, warm.hunks, warm.stop_reason) == (
            cold.rewrite,
            cold.hunks,
            cold.stop_reason,
        ), name
        stats = warm.describe()
        assert stats["reusedTokens"] == cold.prompt_tokens - 1, name  # the last one is computed
        assert stats["prewarmedTokens"] == cold.prompt_tokens - 1 - head, name
        again = editor.predict(REQUEST)  # its own cache now, no pre-warm: none counted
        assert again.describe()["prewarmedTokens"] == 0 and again.tokens == cold.tokens, name


def test_the_head_prefilled_ahead_is_what_a_first_request_starts_from(tiny_model_dirs):
    for name, loaded in chat_models(tiny_model_dirs).items():
        cold = NextEditor(loaded, FLAT_COST).predict(REQUEST)
        editor = NextEditor(loaded, FLAT_COST)
        # The head of the family only: the request's text and edits do not matter.
        head = editor.prepare_head(NextEditRequest(text="", cursor_line=0, prompt_format="chat"))
        assert head == cold.stats["reusedPromptTokens"] > 0, name
        assert editor.prepare_head(REQUEST) == head, name  # kept: prefilled once
        warm = editor.predict(REQUEST)
        assert warm.tokens == cold.tokens and warm.hunks == cold.hunks, name
        assert warm.stats["reusedPromptTokens"] == head, name
    plain = NextEditor(next(iter(chat_models(tiny_model_dirs).values())), FLAT_COST)
    assert plain.prepare_head(dataclasses.replace(REQUEST, prompt_format="plain")) == 0


def test_a_prewarm_stopped_after_a_chunk_keeps_it_and_the_rewrite_is_the_same(tiny_model_dirs):
    for name, loaded in chat_models(tiny_model_dirs).items():
        cold = NextEditor(loaded, FLAT_COST).predict(REQUEST)
        editor = NextEditor(loaded, FLAT_COST)
        polls: list[bool] = []
        done = editor.prewarm(REQUEST, cancelled=lambda polls=polls: polls.append(True) or True)
        assert done["cancelled"] and len(polls) == 1, name  # polled between two chunks only
        assert done["prefilledTokens"] == PREWARM_CHUNK, name
        warm = editor.predict(REQUEST)
        assert warm.describe()["prewarmedTokens"] == PREWARM_CHUNK, name
        assert warm.tokens == cold.tokens and warm.hunks == cold.hunks, name


def test_a_prewarm_with_the_window_guessed_wrong_is_reused_up_to_where_they_differ(
    tiny_model_dirs,
):
    for name, loaded in chat_models(tiny_model_dirs).items():
        asked = dataclasses.replace(REQUEST, window_lines=8)  # the window ends sooner
        cold = NextEditor(loaded, FLAT_COST).predict(asked)
        editor = NextEditor(loaded, FLAT_COST)
        done = editor.prewarm(REQUEST)
        warm = editor.predict(asked)
        assert warm.tokens == cold.tokens and warm.hunks == cold.hunks, name
        stats = warm.describe()
        assert 0 < stats["prewarmedTokens"] < done["prefilledTokens"], name
        assert stats["reusedTokens"] < warm.prompt_tokens - 1, name


def test_no_prewarm_for_plain_decoding_or_without_a_buffer(tiny_model_dir):
    editor = NextEditor(load_model(tiny_model_dir, device="cpu"), FLAT_COST)
    for request in (
        dataclasses.replace(REQUEST, plain=True),
        dataclasses.replace(REQUEST, buffer_id=None),
    ):
        assert editor.prewarm(request)["prefilledTokens"] == 0
    assert len(editor.decoder.prefix_cache) == 0


def test_the_kept_caches_are_bounded_to_the_most_recent_buffers(tiny_model_dir):
    editor = NextEditor(load_model(tiny_model_dir, device="cpu"), FLAT_COST)
    buffers = [f"file:///b{i}.py" for i in range(MAX_BUFFERS + 3)]
    for buffer in buffers:
        assert editor.prewarm(dataclasses.replace(REQUEST, buffer_id=buffer))["prefilledTokens"]
    cache = editor.decoder.prefix_cache
    assert len(cache) == MAX_BUFFERS
    assert all(buffer in cache for buffer in buffers[-MAX_BUFFERS:])
    assert len(editor._prewarmed) <= MAX_BUFFERS
    one = cache.memory_bytes() // MAX_BUFFERS
    assert 0 < cache.memory_bytes() <= MAX_BUFFERS * one * 1.01
    editor.forget(buffers[-1])
    assert len(cache) == MAX_BUFFERS - 1 and buffers[-1] not in editor._prewarmed


def test_the_bench_asks_after_the_pause_with_the_prewarm_done_and_the_same_tokens(tiny_model_dirs):
    """bench edits' `after_pause`: the pre-warm runs on the calling thread until the timer's
    request (here after it finished: a tiny model), the request then reuses all of it and
    rewrites as a cold request does; the breakdown says where its time went."""
    for name, loaded in chat_models(tiny_model_dirs).items():
        cold = NextEditor(loaded, FLAT_COST).predict(REQUEST)
        head = cold.stats["reusedPromptTokens"]
        result = after_pause(NextEditor(loaded, FLAT_COST), REQUEST, True, pause_ms=1500)
        assert result.stats["prewarm"]["cancelled"] is False, name
        assert result.stats["prewarm"]["prefilledTokens"] == cold.prompt_tokens - head, name
        assert result.describe()["prewarmedTokens"] == cold.prompt_tokens - 1 - head, name
        assert result.tokens == cold.tokens and result.hunks == cold.hunks, name
        spent = after_request(result)
        assert spent["prefilledTokens"] == 1 and spent["passes"] >= 1, name
        assert 0 <= spent["prewarmWaitMs"] < 1000, name  # the pre-warm was done by then
