"""A buffer's recent edits: one edit per place typed through, merged as the user types, bounded."""

from __future__ import annotations

import random

from memosight_lsp.next_edit.edit_history import MAX_EDITS, EditHistory, diff_span

CODE = "def area(width, height):\n    size = width * height\n    return size\n"


def type_through(history: EditHistory, uri: str, text: str, at: int, typed: str) -> str:
    """Type `typed` at offset `at` one character a keystroke; returns the text after."""
    for i, char in enumerate(typed):
        text = text[: at + i] + char + text[at + i :]
        history.changed(uri, text)
    return text


def test_typing_one_word_is_one_edit_with_its_whole_lines():
    history = EditHistory()
    history.opened("u", CODE)
    at = CODE.index("size")
    text = CODE[:at] + CODE[at + len("size") :]  # the old name selected and deleted
    history.changed("u", text)
    type_through(history, "u", text, at, "area")
    (edit,) = history.recent("u")
    assert (edit.old, edit.new, edit.line) == ("size", "area", 1)
    assert edit.before == "    size = width * height"
    assert edit.after == "    area = width * height"


def test_typed_and_erased_again_is_forgotten():
    history = EditHistory()
    history.opened("u", CODE)
    at = CODE.index("\n    return")
    text = type_through(history, "u", CODE, at, "  # x")
    assert len(history.recent("u")) == 1
    for end in range(at + len("  # x"), at, -1):  # backspace, one character a keystroke
        text = text[: end - 1] + text[end:]
        history.changed("u", text)
    assert text == CODE
    assert history.recent("u") == []


def test_edits_at_other_places_are_separate_and_bounded():
    history = EditHistory()
    text = "\n".join(f"line{i} = {i}" for i in range(40)) + "\n"
    history.opened("u", text)
    for i in range(MAX_EDITS + 3):
        at = text.index(f"line{i} =") + len(f"line{i} = ")
        text = text[:at] + "1" + text[at:]
        history.changed("u", text)
    edits = history.recent("u")
    assert len(edits) == MAX_EDITS
    assert [e.line for e in edits] == list(range(3, MAX_EDITS + 3))
    assert edits[-1].after == f"line{MAX_EDITS + 2} = 1{MAX_EDITS + 2}"


def test_unknown_and_closed_buffers_keep_nothing_and_buffers_are_bounded():
    history = EditHistory(max_buffers=3)
    assert history.changed("never-opened", "x") is None
    assert history.recent("never-opened") == []
    history.opened("u", "a")
    history.changed("u", "ab")
    history.closed("u")
    assert history.recent("u") == []
    for i in range(5):
        history.opened(f"b{i}", "x")
        history.changed(f"b{i}", "xy")
    assert history.recent("b0") == [] and len(history.recent("b4")) == 1


def test_diff_span_is_the_one_changed_span_of_long_texts():
    rng = random.Random(3)
    base = "".join(rng.choice("ab\n ") for _ in range(20_000))
    for _ in range(200):
        start = rng.randrange(len(base))
        end = start + rng.randrange(0, 50)
        new = base[:start] + "".join(rng.choice("abc") for _ in range(rng.randrange(0, 9)))
        new += base[end:]
        span = diff_span(base, new)
        if new == base:
            assert span is None
            continue
        assert span is not None
        at, old, inserted = span
        assert base[:at] + inserted + base[at + len(old) :] == new
        assert len(old) <= end - start and len(inserted) <= 8
